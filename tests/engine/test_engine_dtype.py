"""`engine.dtype`: the engine's weights and KV cache in another dtype than the model it is given."""

from types import SimpleNamespace

import pytest
import torch
import torch.multiprocessing as tmp

from engine_helpers import ARCH, random_prompts, reference_logprobs
from tempering.config import ConfigError, EngineConfig
from tempering.engine import LLM, SamplingParams
from tempering.engine.cpu import paged_decode
from tempering.models import build_model
from tempering.rollout import worker
from tempering.weights import EngineSync, WeightStore


def test_a_bf16_engine_casts_a_copy_and_matches_its_own_trainer_forward(model, monkeypatch):
    """The caller's fp32 model is left as it is; the engine's copy is bf16, so is its KV pool (read
    by the paged kernel), and its sampled tokens' logprobs are the bf16 model's full forward's."""
    calls = []
    read = paged_decode.Reader.read
    monkeypatch.setattr(paged_decode.Reader, "read", lambda *a, **k: calls.append(1) or read(*a, **k))
    engine = LLM(model, max_seq_len=128, dtype="bfloat16")
    assert next(model.parameters()).dtype == torch.float32
    assert {p.dtype for p in engine.model.parameters()} == {torch.bfloat16}
    assert engine.pool.dtype == torch.bfloat16 and engine.pool.bytes_per_token == LLM(
        model, max_seq_len=128).pool.bytes_per_token // 2
    prompts = random_prompts(4, 5, 30, seed=21)
    outs = engine.generate(prompts, SamplingParams(temperature=1.0, seed=3, max_tokens=24, ignore_eos=True))
    assert calls  # decode read the bf16 pool in place
    gaps = []
    for prompt, out in zip(prompts, outs):
        ref = reference_logprobs(engine.model, prompt, out.outputs[0].token_ids)
        got = torch.tensor(out.outputs[0].logprobs)
        # bf16 arithmetic both ways, in different orders and kernels: a bf16 rounding apart, not exactly
        torch.testing.assert_close(got, ref.float(), atol=1e-2, rtol=0)
        gaps.append((got - reference_logprobs(model, prompt, out.outputs[0].token_ids)).abs().mean())
    assert max(gaps) > 1e-4  # and not the fp32 model's: the engine did run in bf16


def test_loaded_fp32_weights_are_cast_as_a_fresh_engine_of_them_would_be(model):
    engine = LLM(model, max_seq_len=128, dtype="bfloat16")
    new = build_model(ARCH, seed=11).eval()
    engine.load_weights(new.state_dict(), version=1)
    fresh = LLM(new, max_seq_len=128, dtype="bfloat16")
    prompts = random_prompts(3, 5, 20, seed=5)
    greedy = SamplingParams(temperature=0, max_tokens=16, ignore_eos=True)
    a, b = engine.generate(prompts, greedy), fresh.generate(prompts, greedy)
    assert [o.outputs[0].token_ids for o in a] == [o.outputs[0].token_ids for o in b]
    assert [o.outputs[0].logprobs for o in a] == [o.outputs[0].logprobs for o in b]


def test_auto_and_the_same_dtype_use_the_model_itself(model):
    assert LLM(model, max_seq_len=64).model is model
    assert LLM(model, max_seq_len=64, dtype="float32").model is model


def test_an_unknown_dtype_or_one_for_the_vllm_backend_is_a_config_error():
    with pytest.raises(ConfigError, match="engine.dtype"):
        EngineConfig(dtype="int4")
    with pytest.raises(ConfigError, match="engine.dtype: expected 'auto' with engine.backend = 'vllm'"):
        EngineConfig(backend="vllm", dtype="bfloat16")  # vLLM takes its dtype from the model


def test_the_rollout_workers_engine_is_built_in_its_dtype_and_syncs_fp32_weights():
    """As the rollout worker has it: its engine's model built in engine.dtype (no fp32 copy),
    then the trainer's fp32 weights pulled from the store, cast on load."""
    published = build_model(ARCH, seed=4).eval()
    store = WeightStore(published, tmp.get_context("spawn"))
    store.publish(published, 0)
    engine = worker._engine(SimpleNamespace(engine=EngineConfig(max_seq_len=64, dtype="bfloat16"), arch=ARCH),
                            None, replica=0)
    assert {p.dtype for p in engine.model.parameters()} == {torch.bfloat16}
    assert EngineSync(store, engine, partial=False).poll() and engine.version == 0
    cast = build_model(ARCH, seed=4).eval().to(torch.bfloat16)
    assert all(torch.equal(a, b) for a, b in zip(engine.model.state_dict().values(), cast.state_dict().values()))


@pytest.mark.parametrize("units", [False, True])
def test_16_bit_on_a_cpu_without_matrix_units_says_it_will_be_slow(model, monkeypatch, units):
    """bf16 weights without AMX or AVX512-BF16 are widened per matmul, several times slower than
    fp32: the engine warns once, naming engine.dtype and the CPU; with the units, nothing."""
    for probe in ("_is_amx_tile_supported", "_is_avx512_bf16_supported", "_is_amx_fp16_supported"):
        monkeypatch.setattr(torch.cpu, probe, lambda: units)
    import warnings
    for dtype in ("bfloat16", "float16"):
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            LLM(model, max_seq_len=64, dtype=dtype)
        slow = [w for w in seen if "no matrix units" in str(w.message)]
        assert len(slow) == (0 if units else 1)
        if slow:
            assert f"engine.dtype = {dtype}" in str(slow[0].message)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        LLM(model, max_seq_len=64, dtype="float32")
    assert not [w for w in seen if "no matrix units" in str(w.message)]
