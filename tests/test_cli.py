"""The command line: bad input gives one clear error line and exit status 2, never a traceback."""

import json
import subprocess
import sys

import pytest


def run(*args, cwd=None, timeout=120):
    return subprocess.run([sys.executable, "-m", "tempering.cli", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd)


@pytest.mark.parametrize("toml, words", [
    ("[trainer]\nlr = 'x'\n", ["bad.toml", "trainer.lr"]),
    ("[trainer\n", ["bad.toml", "not valid TOML"]),
    ("[tasks]\nweights = { chess = 1.0 }\n", ["tasks.weights.chess: no domain, family or glob"]),
    ("[algorithm]\nadvantage = 'ppo2'\n[sft]\nsteps = 100000\n", ["algorithm.advantage: unknown 'ppo2'"]),
])
def test_bad_config_is_one_clear_line(tmp_path, toml, words):
    (tmp_path / "bad.toml").write_text(toml)
    r = run("train", "--config", str(tmp_path / "bad.toml"), f"--run.dir={tmp_path}/runs", cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr and r.stderr.startswith("error: ")
    for w in words:
        assert w in r.stderr


def test_unisolated_sandbox_must_be_allowed_explicitly(tmp_path):
    r = run("train", "--sandbox.backend=unisolated", "--sandbox.allow_unisolated=false",
            "--tasks.weights={code=1.0}", f"--run.dir={tmp_path}", "--run.steps=0")
    assert r.returncode == 2 and "allow_unisolated" in r.stderr and "Traceback" not in r.stderr


def test_bad_override_and_tasks_listing():
    r = run("train", "--trainer.nope=1")
    assert r.returncode == 2 and "trainer.nope" in r.stderr
    r = run("tasks")
    assert r.returncode == 0 and "arithmetic" in r.stdout and "code" in r.stdout
    r = run("tasks", "show", "chess")
    assert r.returncode == 2 and "unknown task domain" in r.stderr
    r = run("tasks", "chess")  # one parser: an action or nothing, no domain taken for `show`
    assert r.returncode == 2 and "invalid choice: 'chess'" in r.stderr


def test_tasks_is_one_tree_whose_help_lists_every_action(capsys):
    """`check terminal` is the check of the terminal domain like `check sorting` (the shipped set's
    own check is check-shipped): one parser, so an option of another action is an error."""
    from tempering.cli import main

    with pytest.raises(SystemExit) as e:
        main(["tasks", "--help"])
    out = capsys.readouterr().out
    assert e.value.code == 0 and all(f"    {a} " in out for a in ("list", "show", "sample", "score", "check",
                                                                  "check-shipped", "run-folder", "import"))
    with pytest.raises(SystemExit) as e:
        main(["tasks", "check", "terminal", "--sample", "4"])
    assert e.value.code == 2 and "unrecognized arguments: --sample 4" in capsys.readouterr().err


def test_a_stall_names_the_component_without_a_traceback(tmp_path):
    tiny = ["--model.hidden_size=16", "--model.intermediate_size=32", "--model.num_hidden_layers=1",
            "--model.num_attention_heads=2", "--model.num_key_value_heads=1", "--tasks.eval_per_domain=2",
            "--metrics.progress=false", f"--run.dir={tmp_path}", "--run.steps=1"]
    # A rollout batch far larger than the deadline allows: the trainer's wait must end, naming who
    # stalled, and the process must exit (the orders no worker read once held its exit forever:
    # a queue's feeder thread waited for room in a pipe). No warm-up: the stall comes sooner.
    r = run("train", *tiny, "--rollout.tasks_per_step=100000", "--run.stall_timeout_s=2", "--sft.steps=0",
            timeout=300)
    assert r.returncode == 1, r.stderr[-2000:]
    assert "stalled: rollout worker" in r.stderr and "nothing arrived for 2 s" in r.stderr
    assert "Traceback" not in r.stderr


def test_generate_from_a_saved_checkpoint(tmp_path):
    from tempering.models import Arch, build_model, save_hf
    from tempering.tokenizer import char_tokenizer

    tok = char_tokenizer("abc =")
    save_hf(build_model(Arch(vocab_size=tok.vocab_size, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                             num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=64)), tmp_path)
    tok.save(tmp_path)
    r = run("generate", str(tmp_path), "ab=", "c=", "--max-tokens", "4", "-n", "2", "--temperature", "1.0")
    assert r.returncode == 0, r.stderr[-2000:]
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    assert [(x["prompt"], x["index"]) for x in rows] == [("ab=", 0), ("ab=", 1), ("c=", 0), ("c=", 1)]
    assert all(x["finish_reason"] in ("stop", "length") for x in rows)
    r = run("generate", str(tmp_path / "nope"), "x")
    assert r.returncode == 2 and "Traceback" not in r.stderr


def test_a_bug_shows_its_traceback_and_only_user_errors_are_one_line(monkeypatch, capsys):
    """Only a UserError (input to fix) is told in one line; an internal ValueError such as
    "too many values to unpack" is a bug, and its traceback must reach the user."""
    import pytest

    import tempering.train
    from tempering.cli import main
    from tempering.errors import UserError

    def bug(cfg, resume=False):
        a, b = (1, 2, 3)  # noqa: F841 - ValueError: too many values to unpack

    monkeypatch.setattr(tempering.train, "train", bug)
    with pytest.raises(ValueError, match="too many values to unpack"):
        main(["train", "--run.steps=1"])

    def bad_input(cfg, resume=False):
        raise UserError("model.path /nowhere: no such folder")

    monkeypatch.setattr(tempering.train, "train", bad_input)
    assert main(["train", "--run.steps=1"]) == 2
    assert capsys.readouterr().err == "error: model.path /nowhere: no such folder\n"


def test_runtime_and_address_are_overrides_of_the_runtime_section(monkeypatch, capsys):
    import tempering.train
    from tempering.cli import main

    seen = []
    monkeypatch.setattr(tempering.train, "train", lambda cfg, resume=False: seen.append(cfg) or {})
    assert main(["train", "--runtime", "ray", "--address", "10.0.0.1:6379", "--runtime.replicas=2"]) == 0
    assert (seen[0].runtime.kind, seen[0].runtime.address, seen[0].runtime.replicas) == ("ray", "10.0.0.1:6379", 2)
    assert main(["train", "--address", "auto", "--runtime.address=ray://h:10001"]) == 0  # spelled out: it wins
    assert (seen[1].runtime.kind, seen[1].runtime.address) == ("local", "ray://h:10001")


def test_ray_not_installed_is_one_clear_line(monkeypatch):
    from tempering.config import RuntimeConfig
    from tempering.errors import UserError
    from tempering.runtime.factory import open_runtime

    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` fails as where it is not installed
    monkeypatch.delitem(sys.modules, "tempering.runtime.ray", raising=False)
    with pytest.raises(UserError, match=r'Ray is not installed \(pip install "tempering\[ray\]"\)'):
        open_runtime(RuntimeConfig(kind="ray"))
    assert type(open_runtime(RuntimeConfig())).__name__ == "LocalRuntime"
