"""Policy versions: no KV computed under an older version is ever reused; abort and resume."""

import pytest
import torch

from engine_helpers import ARCH, assert_matches_trainer, finish, random_prompts, reference_logprobs
from tempering.engine import LLM, SamplingParams
from tempering.models import build_model

GREEDY = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)


def test_prefix_cache_never_serves_kv_of_an_older_version():
    """Regression: the same prompt after load_weights must be recomputed under the new weights."""
    old, new = build_model(ARCH, seed=0).eval(), build_model(ARCH, seed=1).eval()
    engine = LLM(old, max_seq_len=256)
    prompt = random_prompts(1, 60, 61, seed=6)[0]
    engine.generate([prompt], GREEDY)
    hits = engine.blocks.stats["hit_tokens"]
    engine.load_weights(new.state_dict(), version=1)
    out = engine.generate([prompt], SamplingParams(temperature=1.0, max_tokens=12, seed=0, ignore_eos=True))[0]
    assert engine.blocks.stats["hit_tokens"] == hits  # nothing matched
    assert out.outputs[0].versions == [1] * 12
    assert_matches_trainer(new, prompt, out.outputs[0])
    # Same weights, new version number: still no reuse (the version is the salt, not the bytes).
    engine.load_weights(new.state_dict(), version=2)
    engine.generate([prompt], GREEDY)
    assert engine.blocks.stats["hit_tokens"] == hits


def test_weights_loaded_mid_generation_recompute_running_sequences():
    old, new = build_model(ARCH, seed=0).eval(), build_model(ARCH, seed=1).eval()
    engine = LLM(old, max_seq_len=256)
    prompt = random_prompts(1, 40, 41, seed=7)[0]
    rid = engine.add_request(prompt, SamplingParams(temperature=1.0, max_tokens=16, seed=1, ignore_eos=True))
    for _ in range(6):
        engine.step()
    engine.load_weights(new.state_dict(), version=1)
    done = finish(engine)
    c = done[0].outputs[0]
    assert done[0].request_id == rid and c.versions[:6] == [0] * 6 and c.versions[6:] == [1] * 10
    # The tokens sampled under version 1 were scored by version 1 over the whole context.
    ref_new = reference_logprobs(new, prompt, c.token_ids)
    torch.testing.assert_close(torch.tensor(c.logprobs[6:]), ref_new[6:], atol=1e-4, rtol=0)
    ref_old = reference_logprobs(build_model(ARCH, seed=0).eval(), prompt, c.token_ids)  # `old` now holds `new`
    torch.testing.assert_close(torch.tensor(c.logprobs[:6]), ref_old[:6], atol=1e-4, rtol=0)


def test_abort_returns_partial_tokens_and_resume_continues_under_new_weights():
    old, new = build_model(ARCH, seed=0).eval(), build_model(ARCH, seed=1).eval()
    engine = LLM(old, max_seq_len=256)
    prompt = random_prompts(1, 20, 21, seed=8)[0]
    params = SamplingParams(n=2, temperature=1.0, max_tokens=20, seed=2, ignore_eos=True)
    rid = engine.add_request(prompt, params)
    for _ in range(5):
        engine.step()
    partial = engine.abort(rid)
    assert not engine.has_unfinished() and engine.blocks.num_used == 0
    assert [len(c.token_ids) for c in partial.outputs] == [5, 5]
    assert all(c.finish_reason == "abort" and c.versions == [0] * 5 for c in partial.outputs)
    for c in partial.outputs:
        assert_matches_trainer(old, prompt, c)

    engine.load_weights(new.state_dict(), version=1)
    rid2 = engine.add_request(prompt, params, resume=partial.outputs)
    done = finish(engine)
    assert done[0].request_id == rid2
    for before, after in zip(partial.outputs, done[0].outputs):
        assert after.token_ids[:5] == before.token_ids and len(after.token_ids) == 20
        assert after.versions == [0] * 5 + [1] * 15 and after.finish_reason == "length"
        assert after.logprobs[:5] == before.logprobs
        ref = reference_logprobs(new, prompt, after.token_ids)
        torch.testing.assert_close(torch.tensor(after.logprobs[5:]), ref[5:], atol=1e-4, rtol=0)


def test_the_version_is_set_at_construction_and_changed_only_by_load_weights(model):
    engine = LLM(model, max_seq_len=64, version=-1)  # the rollout worker's start: below any published version
    assert engine.version == -1
    with pytest.raises(AttributeError):
        engine.version = 3
    engine.load_weights(model.state_dict(), version=3)
    out = engine.generate([[1, 2, 3]], SamplingParams(temperature=0, max_tokens=2, ignore_eos=True))[0]
    assert engine.version == 3 and out.outputs[0].versions == [3, 3]
