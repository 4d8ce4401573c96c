"""Decode attention from the paged pool (`paged_decode`) against gather + SDPA, kernel and engine."""

import pytest
import torch
import torch.nn.functional as F

from engine_helpers import random_prompts
from tempering.engine import LLM, SamplingParams, paged_decode
from tempering.engine.kv_cache import KVPool

pytestmark = pytest.mark.skipif(paged_decode._kernel() is None, reason="numba is not installed")
TOL = 1e-5  # the same fp32 keys and values; only the order of summation differs


def _pool(kv_heads: int, d: int, blocks: int = 256, block: int = 4, seed: int = 0) -> KVPool:
    g = torch.Generator().manual_seed(seed)
    pool = KVPool(1, blocks, block, kv_heads, d)
    slots = blocks * block
    # keys of varied scale, so that some rows have a dominant key and the running max moves
    k = torch.randn(slots, kv_heads, d, generator=g) * torch.rand(slots, kv_heads, 1, generator=g) * 6
    pool.write(0, torch.arange(slots), k, torch.randn(slots, kv_heads, d, generator=g))
    return pool


def _reference(pool: KVPool, q, index, mask):
    """SDPA over the gathered keys and values, and the log-sum-exp of the scaled scores."""
    rows, keys = index.shape
    kk, vv = pool.gather(0, index.reshape(-1))
    kk = kk.view(rows, keys, pool.kv_heads, -1).transpose(1, 2)
    vv = vv.view(rows, keys, pool.kv_heads, -1).transpose(1, 2)
    scores = torch.einsum("bgrd,bgkd->bgrk", q, kk) * q.shape[-1] ** -0.5
    scores = scores.masked_fill(~mask[:, None, None], float("-inf"))
    return F.scaled_dot_product_attention(q, kk, vv, attn_mask=mask[:, None, None]), scores.logsumexp(-1)


@pytest.mark.parametrize("kv_heads,rep,d", [(2, 3, 64), (1, 4, 16), (3, 1, 32), (2, 8, 8)])
@pytest.mark.parametrize("rows,keys", [(1, 1), (7, 37), (16, 300)])
def test_matches_gather_then_sdpa(kv_heads, rep, d, rows, keys):
    g = torch.Generator().manual_seed(rows * keys + rep)
    pool = _pool(kv_heads, d)
    # each row its own slots in scattered blocks, padded like a decode bucket (shorter rows have
    # masked tails pointing at slot 0), one row with a window-like mask (sinks, a gap, a tail)
    index = torch.stack([torch.randperm(pool.k[0].shape[0], generator=g)[:keys] for _ in range(rows)])
    lengths = torch.randint(1, keys + 1, (rows,), generator=g)
    lengths[0] = keys
    mask = torch.arange(keys)[None] < lengths[:, None]
    index[~mask] = 0
    if rows > 1 and keys > 8:
        mask[1] = False
        mask[1, :2] = True
        mask[1, keys // 2:] = True
    q = torch.randn(rows, kv_heads, rep, d, generator=g) * 2
    out, lse = paged_decode.attend(pool, 0, q, index, mask)
    ref, ref_lse = _reference(pool, q, index, mask)
    torch.testing.assert_close(out, ref, atol=TOL, rtol=1e-5)
    torch.testing.assert_close(lse, ref_lse, atol=TOL, rtol=1e-5)


def test_only_float32_cpu_pools_use_it(monkeypatch):
    assert paged_decode.use(KVPool(1, 4, 4, 2, 8))
    assert not paged_decode.use(KVPool(1, 4, 4, 2, 8, dtype="int8"))
    assert not paged_decode.use(KVPool(1, 4, 4, 2, 8, model_dtype=torch.bfloat16))
    monkeypatch.setattr(paged_decode, "ENABLED", False)
    assert not paged_decode.use(KVPool(1, 4, 4, 2, 8))


OPTIONS = {"plain": {}, "block 16": {"block_size": 16},
           "window + sinks": {"sliding_window": 24, "attention_sinks": 3, "max_batched_tokens": 32,
                              "max_batch_size": 8}}


@pytest.mark.parametrize("options", OPTIONS.values(), ids=OPTIONS.keys())
def test_the_engine_gives_the_same_tokens_and_logprobs_as_with_gather(model, monkeypatch, options):
    """Decode buckets of varied lengths, and n=4 samples of long prompts whose shared prefix is
    read once (cascade: the kernel's log-sum-exp over each row's own keys is merged with it)."""
    prompts = random_prompts(5, 20, 120, seed=3)
    params = [SamplingParams(n=4, temperature=1.0, seed=5, max_tokens=48, ignore_eos=True),
              SamplingParams(temperature=0, max_tokens=48, ignore_eos=True)]
    runs = {}
    for enabled in (True, False):
        monkeypatch.setattr(paged_decode, "ENABLED", enabled)
        engine = LLM(model, max_seq_len=256, **options)
        runs[enabled] = [engine.generate(prompts, p) for p in params]
        if not options:
            assert engine.runner.shared_prefix_reads > 0  # the cascade path ran
    for a, b in zip(runs[True], runs[False]):
        for x, y in zip(a, b):
            for cx, cy in zip(x.outputs, y.outputs):
                assert cx.token_ids == cy.token_ids
                torch.testing.assert_close(torch.tensor(cx.logprobs), torch.tensor(cy.logprobs), atol=1e-5, rtol=0)
