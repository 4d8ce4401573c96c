"""The engine makes every tensor on the model's device. With the default device set to "meta",
a tensor made without naming its device lands there and any op mixing it with the model's
would fail or be garbage, so a run equal to a plain one shows none is made on an implicit (CPU)
device: the same engine runs where the model is (a GPU) with no CPU-only index tensors."""

import pytest
import torch

from engine_helpers import random_prompts
from tempering.engine import LLM, SamplingParams

OPTIONS = {"default": {}, "int8 kv": {"kv_dtype": "int8"},
           "window + sinks": {"sliding_window": 24, "attention_sinks": 3, "max_batched_tokens": 32, "max_batch_size": 8},
           "flex": {"attention": "flex", "sliding_window": 24, "attention_sinks": 3}}


@pytest.mark.parametrize("options", OPTIONS.values(), ids=OPTIONS.keys())
def test_nothing_is_made_on_an_implicit_device(model, options):
    prompts = random_prompts(6, 20, 90, seed=4)
    # n=3 forks (a partial block copied), shared prefixes read once (cascade), seeded sampling
    params = [SamplingParams(n=3, temperature=0, max_tokens=40, ignore_eos=True),
              SamplingParams(n=2, temperature=1.0, seed=7, max_tokens=40, ignore_eos=True)]
    engine = LLM(model, max_seq_len=256, **options)
    plain = [engine.generate(prompts, p) for p in params]  # the second reads the first's prefix cache
    with torch.device("meta"):
        engine = LLM(model, max_seq_len=256, **options)
        assert engine.pool.k[0].device.type == "cpu"  # the model's device, not the default one
        on_meta = [engine.generate(prompts, p) for p in params]
    for a, b in zip(plain, on_meta):
        for x, y in zip(a, b):
            for cx, cy in zip(x.outputs, y.outputs):
                assert cx.token_ids == cy.token_ids
                torch.testing.assert_close(torch.tensor(cy.logprobs), torch.tensor(cx.logprobs), atol=1e-5, rtol=0)
