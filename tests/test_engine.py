"""The engine against HF generate (greedy tokens) and against the trainer (logprobs)."""

import pytest
import torch

from tempering.engine import LLM, SamplingParams
from tempering.models import load_hf
from tempering.trainer import token_logprobs


def prompts(n=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 101, (int(torch.randint(2, 30, (1,), generator=g)),), generator=g).tolist()
            for _ in range(n)]


def test_greedy_equals_hf_generate(hf_llama_dir):
    path, hf = hf_llama_dir
    engine = LLM(load_hf(path), max_seq_len=256)
    ps = prompts()
    outs = engine.generate(ps, SamplingParams(temperature=0, max_tokens=24, ignore_eos=True))
    for p, out in zip(ps, outs):
        ref = hf.generate(torch.tensor([p]), max_new_tokens=24, do_sample=False, min_new_tokens=24)
        assert out.outputs[0].token_ids == ref[0, len(p):].tolist()


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_logprobs_equal_trainer_recompute(hf_llama_dir, temperature):
    path, _ = hf_llama_dir
    model = load_hf(path)
    engine = LLM(model, max_seq_len=256)
    ps = prompts(4, seed=1)
    outs = engine.generate(ps, SamplingParams(n=3, temperature=temperature, max_tokens=20, seed=7, ignore_eos=True))
    for p, out in zip(ps, outs):
        for c in out.outputs:
            ids = torch.tensor([p + c.token_ids])
            with torch.no_grad():
                logp, _ = token_logprobs(model, ids, temperature)
            torch.testing.assert_close(torch.tensor(c.logprobs), logp[0, len(p) - 1:], atol=1e-4, rtol=0)


def test_seeded_sampling_is_reproducible_and_batch_independent(hf_llama_dir):
    path, _ = hf_llama_dir
    engine = LLM(load_hf(path), max_seq_len=256)
    ps = prompts(3, seed=2)
    params = SamplingParams(n=2, temperature=1.0, max_tokens=10, seed=3, ignore_eos=True)
    a = engine.generate(ps, params)
    b = engine.generate(ps[:1], params)
    assert [c.token_ids for c in a[0].outputs] == [c.token_ids for c in b[0].outputs]
    assert a[0].outputs[0].token_ids != a[0].outputs[1].token_ids


def test_stops_and_versions(hf_llama_dir):
    path, _ = hf_llama_dir
    model = load_hf(path)
    engine = LLM(model, max_seq_len=256)
    p = prompts(1, seed=3)[0]
    first = engine.generate([p], SamplingParams(temperature=0, max_tokens=12, ignore_eos=True))[0].outputs[0]
    stop_at = first.token_ids[4]
    engine2 = LLM(model, max_seq_len=256, eos_token_ids=[stop_at])
    out = engine2.generate([p], SamplingParams(temperature=0, max_tokens=12))[0].outputs[0]
    assert out.token_ids == first.token_ids[: first.token_ids.index(stop_at) + 1] and out.finish_reason == "stop"
    assert first.finish_reason == "length" and len(first.token_ids) == 12

    state = {k: v * 0 for k, v in model.state_dict().items()}
    engine.load_weights(state, version=5)
    out = engine.generate([p], SamplingParams(temperature=0, max_tokens=3, ignore_eos=True))[0].outputs[0]
    assert out.versions == [5, 5, 5]
    with pytest.raises(ValueError, match="unknown tensors"):
        engine.load_weights({"nope": torch.zeros(1)}, version=6)


def test_bad_requests_are_errors(hf_llama_dir):
    path, _ = hf_llama_dir
    engine = LLM(load_hf(path), max_seq_len=32)
    with pytest.raises(ValueError, match="max_seq_len"):
        engine.generate([[1, 2, 3]], SamplingParams(max_tokens=40))
    with pytest.raises(ValueError, match="empty prompt"):
        engine.generate([[]])
    with pytest.raises(ValueError, match="top_p"):
        SamplingParams(top_p=0)
