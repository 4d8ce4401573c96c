"""`engine.weights = "int8"`: the engine steps on a copy of its float32 model whose linear layers
have int8 weights (one scale per output row), made again at every weight load. Oracles: a hand
computation of one layer (the dequantized weights' product), the int8 copy's own full forward
(the engine's paged KV, prefix cache and sampler give its logprobs for the tokens it sampled), a
fresh int8 copy of the newly loaded weights (a load must refresh it), and the float32 model
(close, not equal)."""

from __future__ import annotations

import pytest
import torch

from engine_helpers import ARCH, random_prompts, reference_logprobs
from tempering.config import ConfigError, EngineConfig
from tempering.engine import LLM, SamplingParams
from tempering.engine.cpu.int8_weights import Int8Weights
from tempering.models import build_model


def test_int8_rollouts_match_their_own_model_and_stay_close_to_float32(model):
    engine = LLM(model, max_seq_len=128, weights="int8")
    assert engine.model is model and engine.runner.model is engine.int8.model  # loads go to the float32 one
    prompts = random_prompts(4, 5, 30, seed=5)
    outs = engine.generate(prompts, SamplingParams(temperature=1.0, seed=3, max_tokens=20, ignore_eos=True))
    for prompt, out in zip(prompts, outs):
        c = out.outputs[0]
        own = (torch.tensor(c.logprobs) - full_forward_logprobs(engine.int8.model, prompt, c.token_ids)).abs()
        fp32 = (torch.tensor(c.logprobs) - reference_logprobs(model, prompt, c.token_ids)).abs()
        assert own.max() < 1e-4, own.max()  # the int8 model's: only its weights are rounded
        # int8's rounding: present (a float32 engine is within 1e-4 of this reference), and small
        assert 1e-4 < fp32.max() < 0.1, fp32


def full_forward_logprobs(model, prompt: list[int], completion: list[int]) -> torch.Tensor:
    """The completion's logprobs from one forward pass over the whole sequence, no KV cache (an
    int8 Linear has no weight tensor for the trainer's chunked head to take)."""
    ids = torch.tensor([prompt + completion])
    with torch.no_grad():
        logp = torch.log_softmax(model(ids[:, :-1]), -1).gather(-1, ids[:, 1:, None]).squeeze(-1)
    return logp[0, len(prompt) - 1:]


def test_a_weight_load_refreshes_the_int8_copy():
    engine = LLM(build_model(ARCH, seed=0).eval(), max_seq_len=128, weights="int8")
    before = Int8Weights(build_model(ARCH, seed=0).eval()).model
    new = build_model(ARCH, seed=7)
    engine.load_weights(new.state_dict(), version=1)
    fresh = Int8Weights(build_model(ARCH, seed=7)).model
    ids = torch.tensor([random_prompts(1, 12, 13, seed=9)[0]])
    with torch.no_grad():
        torch.testing.assert_close(engine.int8.model(ids), fresh(ids), atol=0, rtol=0)
        assert (engine.int8.model(ids) - before(ids)).abs().max() > 1e-3  # not the old weights


@pytest.mark.parametrize("rows", [1, 3, 4, 9])
def test_an_int8_layer_is_the_product_with_its_dequantized_weights(rows):
    """int8_linear.c against x @ (w_int8 * scale).T + b, for row and column counts on and off its
    4 x 4 tiles and a width off its vector length; and the rounding against float32's weights."""
    from torch import nn

    from tempering.engine.cpu.int8_weights import Int8Linear

    torch.manual_seed(rows)
    linear = nn.Linear(70, 37)
    q = Int8Linear(linear)
    x = torch.randn(2, rows, 70)
    want = x @ (q.weight_int8.float() * q.scale[:, None]).T + linear.bias
    torch.testing.assert_close(q(x), want, atol=1e-5, rtol=0)
    assert (q.weight_int8.float() * q.scale[:, None] - linear.weight).abs().max() <= q.scale.max() / 2 + 1e-7
    assert q.weight_int8.abs().max() == 127


def test_int8_needs_a_float32_engine(model):
    with pytest.raises(ValueError, match="needs a float32 model"):
        LLM(model, max_seq_len=128, weights="int8", dtype="bfloat16")
    with pytest.raises(ConfigError, match="engine.weights"):
        EngineConfig(weights="int4")


@pytest.mark.parametrize("flags", ["-DW=8", "-DW=16", "-DW=8 -mno-avx512f -mno-avx2"])
def test_each_build_of_the_kernel_gives_the_same_products(flags, tmp_path, monkeypatch):
    """Built for vectors of 16 floats (AVX-512), of 8 (AVX2) and with no x86 widening at all
    (the vector extensions' own conversion, as on NEON), the kernel computes the same layer."""
    import platform

    from engine_helpers import built_with
    from tempering.engine.cpu import int8_weights

    if "avx" in flags and platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip("-mno-avx2 is an x86 flag")
    with built_with([int8_weights._kernel], flags, tmp_path, monkeypatch):
        assert int8_weights._kernel() is not None
        for rows in (1, 3, 4, 9):
            test_an_int8_layer_is_the_product_with_its_dequantized_weights(rows)
