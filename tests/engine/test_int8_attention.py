"""Fused int8 attention (`int8_attention`) against dequantize-then-SDPA, kernel and engine."""

import pytest
import torch
import torch.nn.functional as F

from engine_helpers import engine_with, random_prompts
from tempering.engine import SamplingParams, int8_attention, kv_cache
from tempering.engine.kv_cache import KVPool
from tempering.engine.plan import choose_plan

TOL = 1e-5  # both are fp32 over the same int8 values; only summation order differs


def _pool(kv_heads: int, d: int, slots: int = 2048, seed: int = 0) -> KVPool:
    g = torch.Generator().manual_seed(seed)
    pool = KVPool(1, slots // 16, 16, kv_heads, d, dtype="int8")
    # keys of varied scale per token, so the per-token scales matter
    k = torch.randn(slots, kv_heads, d, generator=g) * torch.rand(slots, kv_heads, 1, generator=g) * 4
    pool.write(0, torch.arange(slots), k, torch.randn(slots, kv_heads, d, generator=g))
    return pool


def _reference(pool: KVPool, q, index, mask):
    b, k = index.shape
    kk, vv = pool.gather(0, index.reshape(-1))
    kk = kk.view(b, k, pool.kv_heads, -1).transpose(1, 2)
    vv = vv.view(b, k, pool.kv_heads, -1).transpose(1, 2)
    scores = torch.einsum("bgrqd,bgkd->bgrqk", q.view(b, pool.kv_heads, -1, *q.shape[2:]), kk).flatten(1, 2)
    scores = scores * q.shape[-1] ** -0.5
    if mask is not None:
        scores = scores.masked_fill(~mask[:, None], float("-inf"))
    am = None if mask is None else mask[:, None]
    return F.scaled_dot_product_attention(q, kk, vv, attn_mask=am, enable_gqa=True), scores.logsumexp(-1)


@pytest.mark.parametrize("small", [False, True], ids=["one chunk", "many chunks"])
@pytest.mark.parametrize("heads,kv_heads,d", [(4, 2, 16), (6, 2, 64), (3, 3, 32)])
@pytest.mark.parametrize("rows,keys,queries", [(1, 1, 1), (5, 37, 1), (16, 300, 1), (1, 700, 24), (3, 64, 16)])
def test_fused_matches_dequantize_then_sdpa(monkeypatch, small, heads, kv_heads, d, rows, keys, queries):
    if small:  # force several key chunks and query blocks
        monkeypatch.setattr(int8_attention, "CHUNK", 16 * rows * kv_heads * d)
        monkeypatch.setattr(int8_attention, "SCORES", 2 * rows * heads * keys)
    g = torch.Generator().manual_seed(rows * 1000 + keys + queries)
    pool = _pool(kv_heads, d)
    index = torch.randint(0, 2048, (rows, keys), generator=g)
    # as the decode buckets pad: each row's first `length` keys, the rest masked (pointing at slot 0)
    lengths = torch.randint(1, keys + 1, (rows,), generator=g)
    lengths[0] = keys
    valid = torch.arange(keys)[None] < lengths[:, None]
    index = torch.where(valid, index, 0)
    mask = valid[:, None, :].expand(rows, queries, keys).clone()
    if queries > 1:  # a prefill chunk's causal mask over the end of its context
        pos = keys - queries + torch.arange(queries)
        mask &= torch.arange(keys)[None, None, :] <= pos[None, :, None].clamp(min=0)
        mask[:, :, 0] = True
    q = torch.randn(rows, heads, queries, d, generator=g) * 2
    ref, ref_lse = _reference(pool, q, index, mask)
    out, lse = int8_attention.attend(pool, 0, q, index, mask, lse=True)
    torch.testing.assert_close(out, ref, atol=TOL, rtol=0)
    torch.testing.assert_close(lse, ref_lse, atol=TOL, rtol=TOL)
    torch.testing.assert_close(int8_attention.attend(pool, 0, q, index, mask), out, atol=0, rtol=0)


def test_no_mask_reads_every_key():
    pool = _pool(2, 16)
    index = torch.arange(500)[None]
    q = torch.randn(1, 4, 3, 16)
    ref, _ = _reference(pool, q, index, None)
    torch.testing.assert_close(int8_attention.attend(pool, 0, q, index), ref, atol=TOL, rtol=0)


def test_fused_differs_from_fp32_keys_by_the_quantization_only():
    """Reading int8 is not reading the float keys: the fused result is the dequantized one, and
    that differs from attention over the unquantized keys (so the comparisons above can fail)."""
    g = torch.Generator().manual_seed(3)
    k, v = torch.randn(256, 2, 16, generator=g) * 3, torch.randn(256, 2, 16, generator=g)
    pool = KVPool(1, 16, 16, 2, 16, dtype="int8")
    pool.write(0, torch.arange(256), k, v)
    q = torch.randn(1, 4, 1, 16, generator=g) * 3
    fused = int8_attention.attend(pool, 0, q, torch.arange(256)[None])
    exact = F.scaled_dot_product_attention(q, k.transpose(0, 1)[None], v.transpose(0, 1)[None], enable_gqa=True)
    assert (fused - exact).abs().max() > 10 * TOL


def test_auto_mode_fuses_long_decode_reads_only():
    int8, fp32 = KVPool(1, 4, 16, 2, 16, dtype="int8"), KVPool(1, 4, 16, 2, 16)
    assert choose_plan(int8).int8_attention == "auto" and choose_plan(fp32).int8_attention == "never"
    use, keys = int8_attention.use, int8_attention.MIN_KEYS
    assert use("auto", keys, prefill=False)
    assert not use("auto", keys - 1, prefill=False)
    assert not use("auto", 10 * keys, prefill=True)  # measured slower
    assert not use("never", 10 * keys, prefill=False) and use("always", 1, prefill=True)


OPTIONS = {
    "chunked prefill + cascade": {"max_batched_tokens": 48, "max_batch_size": 8},
    "sparse": {"sparse_topk": 1, "sparse_local_blocks": 1, "max_batched_tokens": 48, "max_batch_size": 8},
}


@pytest.mark.parametrize("options", OPTIONS.values(), ids=OPTIONS.keys())
def test_engine_greedy_tokens_equal_the_dequantize_path(model, monkeypatch, options):
    prompts = random_prompts(4, 60, 120, seed=21)
    params = SamplingParams(n=3, temperature=0, max_tokens=40, ignore_eos=True)

    apart = kv_cache.HeadsApart.gather  # block-sparse rows gather through a per-kv-head view

    def run(fused: bool):
        # paged_decode off: its own decode path for int8 (test_paged_decode)
        paths = {"paged_decode": False, "sparse_decode": False, "int8_attention": "always" if fused else "never"}
        engine = engine_with(model, paths, max_seq_len=256, kv_dtype="int8", **options)
        calls = {"gather": 0, "fused": 0}
        gather, attend = engine.pool.gather, int8_attention.attend

        def counted_gather(*a, **kw):
            calls["gather"] += 1
            return gather(*a, **kw)

        def counted_attend(*a, **kw):
            calls["fused"] += 1
            return attend(*a, **kw)

        monkeypatch.setattr(engine.pool, "gather", counted_gather)
        def counted_apart(*a, **kw):
            calls["gather"] += 1
            return apart(*a, **kw)

        monkeypatch.setattr(kv_cache.HeadsApart, "gather", counted_apart)
        monkeypatch.setattr(int8_attention, "attend", counted_attend)
        outs = engine.generate(prompts, params) + engine.generate(prompts, params)  # the second: prefix hits
        monkeypatch.setattr(int8_attention, "attend", attend)
        return outs, calls, engine

    fused, fused_calls, engine = run(True)
    plain, plain_calls, _ = run(False)
    # the fused run never gathered a float copy of the context; the plain one never read int8 itself
    assert fused_calls["gather"] == 0 and fused_calls["fused"] > 0
    assert plain_calls["fused"] == 0 and plain_calls["gather"] > 0
    if "sparse_topk" not in options:
        assert engine.runner.shared_prefix_reads > 0  # the cascade path ran (n=3 share their prompt)
    for a, b in zip(fused, plain):
        for x, y in zip(a.outputs, b.outputs):
            assert x.token_ids == y.token_ids
            torch.testing.assert_close(torch.tensor(x.logprobs), torch.tensor(y.logprobs), atol=1e-4, rtol=0)
