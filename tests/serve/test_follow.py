"""`tempering serve --follow RUN_DIR`: a training run's checkpoints load into the served engine as
they are written, and the version served is in every response; a checkpoint of another model is
skipped and serving goes on."""

from __future__ import annotations

import argparse

import pytest
from serve_helpers import client, serving, wait_until

from tempering.errors import UserError
from tempering.models.scripted import scripted_model, scripted_tokenizer
from tempering.serve.cli import _model
from tempering.trainer.checkpoint import save_checkpoint
from tempering.serve.follow import RunFollower

PIECES = ["assistant: ", "alpha", "beta"]
USER = [{"role": "user", "content": "hi"}]


def says(tok, word: str):
    """The scripted model that answers the chat transcript with `word`."""
    return scripted_model(tok, {tok.encode(PIECES[0])[0]: tok.encode(word)[0]})


def test_the_served_weights_follow_the_runs_checkpoints(tmp_path, capsys):
    tok = scripted_tokenizer(PIECES)
    run = tmp_path / "run"
    save_checkpoint(run, says(tok, "alpha"), tok, {}, {"step": 1, "version": 1})
    folder, version, name = _model(argparse.Namespace(model=None, follow=str(run), name=None))
    assert (folder, version, name) == (run / "checkpoints" / "step-000001" / "model", 1, "run")

    model = says(tok, "alpha")
    follower = RunFollower(run, {k: v.shape for k, v in model.state_dict().items()}, poll_s=0.05)
    with serving(model, tok, source=follower.start()) as srv:
        c = client(srv)
        assert wait_until(lambda: srv.loop.version == 1)
        raw = c.chat.completions.with_raw_response.create(model="tiny", messages=USER)
        out = raw.parse()
        assert (out.choices[0].message.content, out.system_fingerprint) == ("alpha", "tempering-v1")
        assert raw.headers["X-Tempering-Version"] == "1"

        save_checkpoint(run, says(tok, "beta"), tok, {}, {"step": 2, "version": 2})
        assert wait_until(lambda: srv.loop.version == 2)
        out = c.chat.completions.create(model="tiny", messages=USER)
        assert (out.choices[0].message.content, out.system_fingerprint) == ("beta", "tempering-v2")

        # another model's checkpoint: skipped, said once, and the version served stays
        other = scripted_tokenizer(PIECES + ["gamma"])
        save_checkpoint(run, scripted_model(other, {}), other, {}, {"step": 3, "version": 3})
        assert wait_until(lambda: "step-000003" in capsys.readouterr().err)
        assert c.chat.completions.create(model="tiny", messages=USER).system_fingerprint == "tempering-v2"
        assert srv.loop.version == 2 and follower.loads == 2
    follower.close()


def test_following_a_run_without_a_checkpoint_says_so(tmp_path):
    with pytest.raises(UserError, match="no checkpoint yet"):
        _model(argparse.Namespace(model=None, follow=str(tmp_path), name=None))
    with pytest.raises(UserError, match="name a model folder"):
        _model(argparse.Namespace(model=None, follow=None, name=None))
