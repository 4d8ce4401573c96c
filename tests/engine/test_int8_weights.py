"""`engine.weights = "int8"`: the engine steps on a copy of its float32 model whose linear layers
take int8 products (weights with a scale per output row, activations per token outside each
call's outlier columns), made again at every weight load. Oracles: one layer computed in Python
integers, the int8 copy's own full forward over a prefill, a fresh int8 copy of the newly loaded
weights (a load must refresh it), and the float32 model (close, not equal)."""

from __future__ import annotations

import pytest
import torch

from engine_helpers import ARCH, random_prompts, reference_logprobs
from tempering.config import ConfigError, EngineConfig
from tempering.engine import LLM, SamplingParams
from tempering.engine.cpu.int8_weights import Int8Weights
from tempering.models import build_model


def test_int8_rollouts_come_from_their_own_model_and_stay_close_to_float32(model):
    engine = LLM(model, max_seq_len=128, weights="int8")
    assert engine.model is model and engine.runner.model is engine.int8.model  # loads go to the float32 one
    prompts = random_prompts(4, 5, 30, seed=5)
    outs = engine.generate(prompts, SamplingParams(temperature=1.0, seed=3, max_tokens=20, ignore_eos=True))
    for prompt, out in zip(prompts, outs):
        c = out.outputs[0]
        fp32 = (torch.tensor(c.logprobs) - reference_logprobs(model, prompt, c.token_ids)).abs()
        # int8's rounding: present (a float32 engine is within 1e-4 of this reference), and small
        assert 1e-4 < fp32.max() < 0.1, fp32
    # a call's outlier columns depend on the tokens in it, so the int8 model's own logprobs are
    # compared where the engine's calls held exactly these tokens: one prompt's prefill, whose
    # head runs on its last position alone
    int8 = engine.int8.model
    for prompt in prompts:
        first = engine.generate([prompt], SamplingParams(temperature=1.0, seed=4, max_tokens=1))[0].outputs[0]
        with torch.no_grad():
            logits = int8.lm_head(int8.hidden_states(torch.tensor([prompt]))[:, -1])
        own = torch.log_softmax(logits[0], -1)[first.token_ids[0]]
        assert abs(first.logprobs[0] - float(own)) < 1e-4


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
def test_an_int8_layer_is_the_integer_product_outside_its_outlier_columns(rows):
    """Against a plain computation in Python integers: the call's 5 largest columns (70 / 16,
    rounded up) in float32 with the dequantized weights, the rest rounded to int8 per token."""
    import math

    from torch import nn

    from tempering.engine.cpu.int8_weights import Int8Linear

    torch.manual_seed(rows)
    linear = nn.Linear(70, 37)
    q = Int8Linear(linear)
    x = torch.randn(rows, 70, dtype=torch.float64)
    x[:, 11] *= 40  # an outlier column, as a real model's down projection has
    w, scale = q.weight_int8.T.tolist(), q.scale.double()  # [out][in]
    cols = set(x.abs().amax(0).topk(5).indices.tolist())
    want = torch.empty(rows, 37, dtype=torch.float64)
    for r in range(rows):
        step = max(abs(float(x[r, c])) for c in range(70) if c not in cols) / 127
        xq = [0 if c in cols else round(float(x[r, c]) / step) for c in range(70)]
        for o in range(37):
            whole = sum(xq[c] * w[o][c] for c in range(70))  # exact, in Python integers
            outl = sum(float(x[r, c]) * w[o][c] for c in cols)
            want[r, o] = (whole * step + outl) * float(scale[o]) + float(linear.bias[o].detach())
    torch.testing.assert_close(q(x.float()).double(), want, atol=2e-5, rtol=0)
    assert q.outliers == math.ceil(70 / 16)
    assert (q.weight_int8.T.float() * q.scale[:, None] - linear.weight).abs().max() <= q.scale.max() / 2 + 1e-7
    assert q.weight_int8.abs().max() == 127


def test_taking_out_the_outlier_columns_is_what_keeps_a_layer_close():
    """With one column 100x the rest, rounding every column per token loses the others (their
    step is the outlier's); the layer stays near the float32 product of its int8 weights."""
    from torch import nn

    from tempering.engine.cpu.int8_weights import Int8Linear

    torch.manual_seed(0)
    q = Int8Linear(nn.Linear(256, 64, bias=False))
    x = torch.randn(8, 256)
    x[:, 3] *= 100
    deq = q.weight_int8.float() * q.scale
    exact = x @ deq
    step = x.abs().amax(1, keepdim=True) / 127
    naive = torch.round(x / step) * step @ deq
    err, naive_err = (q(x) - exact).abs().max(), (naive - exact).abs().max()
    assert err < 0.05 * naive_err, (err, naive_err)


def test_int8_needs_a_float32_engine(model):
    with pytest.raises(ValueError, match="needs a float32 model"):
        LLM(model, max_seq_len=128, weights="int8", dtype="bfloat16")
    with pytest.raises(ConfigError, match="engine.weights"):
        EngineConfig(weights="int4")
