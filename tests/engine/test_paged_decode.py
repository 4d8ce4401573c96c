"""Decode attention from the paged pool (`paged_decode`) against gather + SDPA, kernel and engine."""

import os
import platform
from dataclasses import replace
import signal
import threading
import time

import pytest
import torch
import torch.nn.functional as F

from engine_helpers import built_with, engine_with, random_prompts, torch_threads
from tempering.engine import LLM, SamplingParams
from tempering.engine.cpu import paged_decode, sampler
from tempering.engine.kv_cache import KVPool
from tempering.engine.plan import choose_plan

pytestmark = pytest.mark.skipif(not paged_decode.built(), reason="no C compiler built paged_decode.c")
TOL = 1e-5  # the same fp32 keys and values; only the order of summation (and exp's polynomial) differs


def _pool(kv_heads: int, d: int, blocks: int = 256, block: int = 4, seed: int = 0) -> KVPool:
    g = torch.Generator().manual_seed(seed)
    pool = KVPool(1, blocks, block, kv_heads, d)
    slots = blocks * block
    # keys of varied scale, so that some rows have a dominant key and the running max moves
    k = torch.randn(slots, kv_heads, d, generator=g) * torch.rand(slots, kv_heads, 1, generator=g) * 6
    pool.write(0, torch.arange(slots), k, torch.randn(slots, kv_heads, d, generator=g))
    return pool


def _reference(pool: KVPool, q, index, mask, layer: int = 0):
    """SDPA over the gathered keys and values, and the log-sum-exp of the scaled scores."""
    rows, keys = index.shape
    kk, vv = pool.gather(layer, index.reshape(-1))
    kk = kk.view(rows, keys, pool.kv_heads, -1).transpose(1, 2)
    vv = vv.view(rows, keys, pool.kv_heads, -1).transpose(1, 2)
    scores = torch.einsum("bgrd,bgkd->bgrk", q, kk) * q.shape[-1] ** -0.5
    scores = scores.masked_fill(~mask[:, None, None], float("-inf"))
    return F.scaled_dot_product_attention(q, kk, vv, attn_mask=mask[:, None, None]), scores.logsumexp(-1)


@pytest.mark.parametrize("kv_heads,rep,d", [(2, 3, 64), (1, 4, 16), (3, 1, 32), (2, 8, 16), (2, 2, 128), (1, 3, 96)])
@pytest.mark.parametrize("rows,keys", [(1, 1), (7, 37), (16, 300)])
def test_matches_gather_then_sdpa(kv_heads, rep, d, rows, keys):
    _check_against_sdpa(kv_heads, rep, d, rows, keys)


def _check_against_sdpa(kv_heads, rep, d, rows, keys):
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


def test_a_prior_is_folded_in_as_attention_over_more_keys():
    """`prior`: an output and log-sum-exp over other keys (block-sparse rows' group means) that the
    kernel's running softmax starts from. Oracle: `partial_attention.merge` of the kernel's own
    result with it; a row-head whose prior is -inf (no other keys) gets the kernel's own."""
    from tempering.engine.partial_attention import merge

    pool, g = _pool(2, 64), torch.Generator().manual_seed(5)
    index = torch.randint(0, 1024, (6, 40), generator=g)
    mask = torch.rand(6, 40, generator=g) < 0.7
    mask[:, 0] = True
    q = torch.randn(6, 2, 3, 64, generator=g)
    other = (torch.randn(6, 2, 3, 64, generator=g), torch.randn(6, 2, 3, generator=g) * 3)
    other[1][2, 1, 0] = other[1][4] = -torch.inf
    own, own_lse = paged_decode.attend(pool, 0, q, index, mask)
    out, lse = paged_decode.attend(pool, 0, q, index, mask, prior=other)
    want, want_lse = merge(own, own_lse, *other), torch.logaddexp(own_lse, other[1])
    torch.testing.assert_close(out, want, atol=TOL, rtol=TOL)
    torch.testing.assert_close(lse, want_lse, atol=TOL, rtol=TOL)
    torch.testing.assert_close(out[4], own[4], atol=TOL, rtol=TOL)
    with pytest.raises(ValueError, match="a prior of"):
        paged_decode.attend(pool, 0, q, index, mask, prior=(other[0][:, :1], other[1]))


def test_one_reader_serves_every_layer_of_a_step():
    """A `Reader` is made once per step and read by each layer: every layer's result is its own
    keys' and values' (not the first layer's), written in place into an `out` when one is given;
    queries that do not fit its rows are a ValueError that says so."""
    g = torch.Generator().manual_seed(7)
    pool = KVPool(3, 64, 4, 2, 16)
    slots = torch.arange(256)
    for layer in range(3):
        pool.write(layer, slots, torch.randn(256, 2, 16, generator=g) * 3, torch.randn(256, 2, 16, generator=g))
    index = torch.stack([torch.randperm(256, generator=g)[:40] for _ in range(5)])
    mask = torch.arange(40)[None] < torch.tensor([40, 1, 17, 33, 8])[:, None]
    reader = paged_decode.Reader(pool, index, mask)
    for layer in (0, 2, 1):
        q = torch.randn(5, 2, 3, 16, generator=g)
        into = torch.full((5, 2, 3, 16), float("nan"))
        out, lse = reader.read(layer, q, into)
        ref, ref_lse = _reference(pool, q, index, mask, layer)
        assert out is into
        torch.testing.assert_close(out, ref, atol=TOL, rtol=1e-5)
        torch.testing.assert_close(lse, ref_lse, atol=TOL, rtol=1e-5)
    with pytest.raises(ValueError, match=r"queries \(4, 2, 3, 16\) do not fit 5 rows"):
        reader.read(0, torch.randn(4, 2, 3, 16))


def _int8_pool(kv_heads: int, d: int, blocks: int = 256, block: int = 4) -> KVPool:
    f32 = _pool(kv_heads, d, blocks, block)
    pool = KVPool(1, blocks, block, kv_heads, d, dtype="int8")
    slots = torch.arange(blocks * block)
    pool.write(0, slots, f32.k[0], f32.v[0])
    return pool


@pytest.mark.parametrize("kv_heads,rep,d", [(2, 3, 64), (1, 4, 16)])
@pytest.mark.parametrize("rows,keys", [(1, 1), (7, 37), (16, 300)])
def test_int8_matches_dequantize_then_sdpa(kv_heads, rep, d, rows, keys):
    """The scales read through the float16 table fold into scores and weights: the same as
    attending over the dequantized keys and values (`gather`), and not over the raw int8."""
    g = torch.Generator().manual_seed(rows + keys)
    pool = _int8_pool(kv_heads, d)
    index = torch.stack([torch.randperm(pool.k[0].shape[0], generator=g)[:keys] for _ in range(rows)])
    mask = torch.arange(keys)[None] < torch.randint(1, keys + 1, (rows,), generator=g)[:, None]
    mask[0] = True
    q = torch.randn(rows, kv_heads, rep, d, generator=g)
    out, lse = paged_decode.attend(pool, 0, q, index, mask)
    ref, ref_lse = _reference(pool, q, index, mask)
    torch.testing.assert_close(out, ref, atol=TOL, rtol=1e-5)
    torch.testing.assert_close(lse, ref_lse, atol=TOL, rtol=1e-5)
    assert (pool.k_scale[0] != 1).all()  # the scales are not trivially 1


def test_runs_of_rows_on_threads_equal_one_thread(monkeypatch):
    """With more torch threads, rows are split into runs on that many threads; every row is
    computed, by the same arithmetic (bitwise equal)."""
    pool, g = _pool(2, 64), torch.Generator().manual_seed(1)
    index = torch.stack([torch.randperm(pool.k[0].shape[0], generator=g)[:200] for _ in range(13)])
    mask = torch.arange(200)[None] < torch.randint(1, 201, (13,), generator=g)[:, None]
    q = torch.randn(13, 2, 3, 64, generator=g)
    one, one_lse = paged_decode.attend(pool, 0, q, index, mask)
    kernel, ran = paged_decode._kernel(), []

    def recorded(*args):
        ran.append((threading.current_thread().name, args[-2], args[-1]))
        return kernel(*args)

    monkeypatch.setattr(paged_decode, "_kernel", lambda: recorded)
    monkeypatch.setattr(paged_decode, "SPLIT_KEYS", 1)
    with torch_threads(3):
        many, many_lse = paged_decode.attend(pool, 0, q, index, mask)
    assert sorted((lo, hi) for _, lo, hi in ran) == [(0, 4), (4, 8), (8, 13)]
    # the caller runs the first run, pool threads the others
    assert [name for name, lo, _ in ran if lo == 0] == [threading.current_thread().name]
    assert all(name.startswith("tempering-native") for name, lo, _ in ran if lo > 0)
    assert torch.equal(one, many) and torch.equal(one_lse, many_lse)


def test_a_forked_child_splits_rows_on_threads_of_its_own(monkeypatch):
    """A child forked after the parent's threads started gets threads of its own (the parent's
    pool, copied, has none and would never run the child's rows)."""
    pool, g = _pool(2, 16), torch.Generator().manual_seed(2)
    index = torch.stack([torch.randperm(pool.k[0].shape[0], generator=g)[:50] for _ in range(8)])
    mask = torch.ones(8, 50, dtype=torch.bool)
    q = torch.randn(8, 2, 3, 16, generator=g)
    monkeypatch.setattr(paged_decode, "SPLIT_KEYS", 1)
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        expected, _ = paged_decode.attend(pool, 0, q, index, mask)  # starts the parent's pool
        pid = os.fork()
        if pid == 0:  # the child: exit 0 only if its split read gives the parent's result
            ok = False
            try:
                ok = torch.equal(paged_decode.attend(pool, 0, q, index, mask)[0], expected)
            finally:
                os._exit(0 if ok else 1)
        deadline = time.monotonic() + 60
        while (done := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        if done[0] == 0:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail("the forked child's read stalled")
        assert os.waitstatus_to_exitcode(done[1]) == 0
    finally:
        torch.set_num_threads(threads)


def _half_pool(dtype: torch.dtype, kv_heads: int, d: int) -> KVPool:
    f32 = _pool(kv_heads, d)
    pool = KVPool(1, 256, 4, kv_heads, d, model_dtype=dtype)
    pool.write(0, torch.arange(1024), f32.k[0].to(dtype), f32.v[0].to(dtype))
    return pool


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("kv_heads,rep,d", [(2, 3, 64), (1, 4, 16)])
def test_16_bit_pools_match_sdpa_over_the_widened_keys(dtype, kv_heads, rep, d):
    """A bfloat16 or float16 pool is read as stored and widened exactly: the same as SDPA in
    float32 over the gathered keys and values cast to float32."""
    g = torch.Generator().manual_seed(d + rep)
    pool = _half_pool(dtype, kv_heads, d)
    index = torch.stack([torch.randperm(1024, generator=g)[:300] for _ in range(9)])
    mask = torch.arange(300)[None] < torch.randint(1, 301, (9,), generator=g)[:, None]
    q = torch.randn(9, kv_heads, rep, d, generator=g) * 2
    out, lse = paged_decode.attend(pool, 0, q, index, mask)
    widened = KVPool(1, 256, 4, kv_heads, d)
    widened.write(0, torch.arange(1024), pool.k[0].float(), pool.v[0].float())
    ref, ref_lse = _reference(widened, q, index, mask)
    torch.testing.assert_close(out, ref, atol=TOL, rtol=1e-5)
    torch.testing.assert_close(lse, ref_lse, atol=TOL, rtol=1e-5)
    assert not torch.equal(pool.k[0].float(), _pool(kv_heads, d).k[0])  # the pool did round


def test_which_cpu_pools_use_it():
    for options in ({}, {"dtype": "int8"}, {"model_dtype": torch.bfloat16}, {"model_dtype": torch.float16}):
        pool = KVPool(1, 4, 4, 2, 16, **options)
        assert paged_decode.misfit(pool) is None and choose_plan(pool).paged_decode
    for pool, why in ((KVPool(1, 4, 4, 2, 8), "head dim 8 is not a multiple of 16"),
                      (KVPool(1, 4, 4, 2, 16, model_dtype=torch.float64), "a float64 pool")):
        assert paged_decode.misfit(pool) == why
        plan = choose_plan(pool)
        assert not plan.paged_decode and why in plan.describe()
        with pytest.raises(ValueError, match=f"AttentionPlan.paged_decode: cannot run here: {why}"):
            replace(plan, paged_decode=True).check(pool)


def test_the_kernel_is_built_once_per_machine_and_cached(tmp_path, monkeypatch):
    """The first use compiles into the cache folder; a later process loads what is there. $CC
    may be a command with flags, as build environments often set it."""
    with built_with([paged_decode._kernel], "-Wall", tmp_path, monkeypatch):
        assert paged_decode._kernel() is not None
        built = list((tmp_path / "tempering").glob("paged_decode-*.so"))
        assert len(built) == 1
        stamp = built[0].stat().st_mtime_ns
        paged_decode._kernel.cache_clear()
        assert paged_decode._kernel() is not None
        assert built[0].stat().st_mtime_ns == stamp  # loaded, not built again
        assert list((tmp_path / "tempering").iterdir()) == built  # no temporary file left behind


@pytest.mark.parametrize("flags", ["-DW=8", "-DW=16", "-DW=8 -mno-f16c"])
def test_both_vector_widths_match_sdpa(flags, tmp_path, monkeypatch):
    """The kernel is written for vectors of 8 floats (AVX2, NEON) or 16 (AVX-512), picked by
    what the machine has; built with each forced (-DW), both compute the same attention: on a
    machine without AVX-512 the compiler splits the 16-float vectors in two. Without F16C (an
    x86 flag) fp16 values and int8 scales are widened in plain C."""
    if "f16c" in flags and platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip("-mno-f16c is an x86 flag")
    with built_with([paged_decode._kernel], flags, tmp_path, monkeypatch):
        assert paged_decode._kernel() is not None
        for kv_heads, rep, d in [(2, 3, 64), (1, 4, 16), (2, 2, 128), (1, 3, 96)]:
            for rows, keys in [(1, 1), (7, 37), (16, 300)]:  # chunks short, whole, and a tail
                _check_against_sdpa(kv_heads, rep, d, rows, keys)
        test_int8_matches_dequantize_then_sdpa(2, 3, 64, 7, 37)
        for dtype in (torch.bfloat16, torch.float16):
            test_16_bit_pools_match_sdpa_over_the_widened_keys(dtype, 2, 3, 64)
            test_16_bit_pools_match_sdpa_over_the_widened_keys(dtype, 1, 4, 16)


def test_without_a_compiler_the_engine_gathers_and_says_why(tmp_path, monkeypatch, model):
    """A compiler that fails: one warning per kernel naming it, the plan takes neither, and the
    engine still decodes (gather + SDPA, PyTorch's sampler) to the same tokens."""
    prompts = random_prompts(3, 10, 40, seed=4)
    greedy = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)
    expected = [o.outputs[0].token_ids for o in LLM(model, max_seq_len=128).generate(prompts, greedy)]
    # `false` exits 1 for anything
    with built_with([paged_decode._kernel, sampler._kernel], "", tmp_path, monkeypatch, compiler="false"):
        with pytest.warns(RuntimeWarning, match="false could not build paged_decode.c"):
            assert not paged_decode.built()
        with pytest.warns(RuntimeWarning, match="false could not build sampler.c: .*; sampling stays in PyTorch"):
            engine = LLM(model, max_seq_len=128)
        assert not engine.plan.paged_decode and not engine.plan.native_sampler
        got = [o.outputs[0].token_ids for o in engine.generate(prompts, greedy)]
        assert got == expected


SPARSE = {"sparse_topk": 1, "sparse_local_blocks": 1, "max_batched_tokens": 48, "max_batch_size": 8}
OPTIONS = {"plain": {}, "block 4": {"block_size": 4},
           "window + sinks": {"sliding_window": 24, "attention_sinks": 3, "max_batched_tokens": 32,
                              "max_batch_size": 8},
           "int8": {"kv_dtype": "int8"}, "fp16 kv": {"kv_dtype": "fp16"}, "bf16 kv": {"kv_dtype": "bf16"},
           "sparse": SPARSE, "sparse int8": {**SPARSE, "kv_dtype": "int8"}, "sparse fp16": {**SPARSE, "kv_dtype": "fp16"}}


@pytest.mark.parametrize("options", OPTIONS.values(), ids=OPTIONS.keys())
def test_the_engine_gives_the_same_tokens_and_logprobs_as_with_gather(model, monkeypatch, options):
    """Decode buckets of varied lengths, and n=4 samples of long prompts whose shared prefix is
    read once (cascade: the kernel's log-sum-exp over each row's own keys is merged with it);
    block-sparse decode rows; int8 pools (without the kernel: `int8_attention` or dequantize)."""
    prompts = random_prompts(5, 20, 120, seed=3)
    # Token for token at temperature 1: logits that differ by float rounding flip a draw whose
    # uniform lies that close to a bin's edge. The generator seeded 7 (seeds 5-7 each have a sample
    # on it) met one in the sparse case with a selection per kv head: logits within 9e-8 of each other, the
    # cumulative mass 0.9498625 at the edge of tokens 91 and 92. Seed 9's samples meet none.
    params = [SamplingParams(n=4, temperature=1.0, seed=9, max_tokens=48, ignore_eos=True),
              SamplingParams(temperature=0, max_tokens=48, ignore_eos=True)]
    runs, read, calls = {}, paged_decode.Reader.read, []
    monkeypatch.setattr(paged_decode.Reader, "read", lambda self, *a, **k: calls.append(a[1].shape) or read(self, *a, **k))
    for enabled in (True, False):
        paths = {} if enabled else {"paged_decode": False, "sparse_decode": False}
        engine = engine_with(model, paths, max_seq_len=256, **options)
        assert engine.plan.paged_decode == enabled
        runs[enabled] = [engine.generate(prompts, p) for p in params]
        if not options:
            assert engine.runner.shared_prefix_reads > 0  # the cascade path ran
        assert bool(calls) == enabled  # the kernel ran, or not at all
        calls.clear()
    # int8: (q . k8) s here, q . (k8 s) in the dequantized copy; the rounding differs a little more
    tol = 1e-4 if options.get("kv_dtype") == "int8" else 1e-5
    for a, b in zip(runs[True], runs[False]):
        for x, y in zip(a, b):
            for cx, cy in zip(x.outputs, y.outputs):
                assert cx.token_ids == cy.token_ids
                torch.testing.assert_close(torch.tensor(cx.logprobs), torch.tensor(cy.logprobs), atol=tol, rtol=0)
