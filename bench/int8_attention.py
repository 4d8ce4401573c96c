"""Micro-benchmark: attention over an int8 KV pool, fused (`int8_attention.attend`, int8 read as
stored) against dequantize-then-SDPA (`KVPool.gather` + `F.scaled_dot_product_attention`, what
the engine did before), and for decode cases the compiled kernel the engine now uses for decode
reads on CPU (`paged_decode.attend`, where its C kernel is built). Decode shapes of bench/engine.py's model (6 query heads, 2 kv heads,
head_dim 64), one layer, paged context (blocks of 16 at random pool places, the rows' lengths
uniform in [3/4, 1] of the bucket's width, masked as the decode buckets are), plus one prefill
chunk (`--prefill` queries against the whole context). Prints one JSON object:

    {"threads": 1, "cases": [{"kind": "decode", "batch": 16, "context": 8192, "dequantize_ms": ...,
      "fused_ms": ..., "ratio": <dequantize_ms / fused_ms = fused keys per second / dequantize's>,
      "max_abs_diff": ..., "kernel_ms": ..., "kernel_vs_fused": <fused_ms / kernel_ms>,
      "kernel_vs_dequantize": ..., "kernel_max_abs_diff": ...}, ...]}

Times are the best of `--reps` calls. A case whose dequantized K/V would exceed `--max-float-gib`
runs fused only.

    python bench/int8_attention.py [--threads 1] [--contexts 1024,8192,32768] [--batches 1,16]
        [--prefill 256] [--reps 5]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tempering.engine import int8_attention  # noqa: E402
from tempering.engine.cpu import paged_decode  # noqa: E402
from tempering.engine.kv_cache import KVPool  # noqa: E402

HEADS, KV_HEADS, HEAD_DIM, BLOCK = 6, 2, 64, 16


def setup(batch: int, context: int, queries: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    blocks = batch * context // BLOCK + 4
    pool = KVPool(1, blocks, BLOCK, KV_HEADS, HEAD_DIM, dtype="int8")
    slots = blocks * BLOCK
    for lo in range(0, slots, 1 << 16):  # written in pieces: the float source stays small
        hi = min(slots, lo + (1 << 16))
        pool.write(0, torch.arange(lo, hi), torch.randn(hi - lo, KV_HEADS, HEAD_DIM, generator=g) * 2,
                   torch.randn(hi - lo, KV_HEADS, HEAD_DIM, generator=g))
    order = torch.randperm(blocks, generator=g)[: batch * context // BLOCK]
    index = (order[:, None] * BLOCK + torch.arange(BLOCK)).reshape(batch, context)
    if queries == 1:
        lengths = torch.randint(context * 3 // 4, context + 1, (batch,), generator=g)
        lengths[0] = context
        valid = torch.arange(context)[None] < lengths[:, None]
        mask = valid[:, None, :]
        index = torch.where(valid, index, 0)
    else:  # the chunk is the context's last `queries` positions, causal
        pos = context - queries + torch.arange(queries)
        mask = (torch.arange(context)[None, :] <= pos[:, None])[None].expand(batch, queries, context)
    q = torch.randn(batch, HEADS, queries, HEAD_DIM, generator=g)
    return pool, q, index, mask


def dequantize_then_sdpa(pool: KVPool, q, index, mask):
    b, k = index.shape
    kk, vv = pool.gather(0, index.reshape(-1))
    kk = kk.view(b, k, KV_HEADS, HEAD_DIM).transpose(1, 2)
    vv = vv.view(b, k, KV_HEADS, HEAD_DIM).transpose(1, 2)
    return F.scaled_dot_product_attention(q, kk, vv, attn_mask=mask[:, None], enable_gqa=True)


def fused(pool: KVPool, q, index, mask):
    return int8_attention.attend(pool, 0, q, index, mask)


def kernel(pool: KVPool, q, index, mask):
    b = q.shape[0]
    rows = q.view(b, KV_HEADS, HEADS // KV_HEADS, HEAD_DIM)
    return paged_decode.attend(pool, 0, rows, index, mask[:, 0])[0].view(b, HEADS, 1, HEAD_DIM)


def best_ms(fn, args, reps: int) -> float:
    fn(*args)
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        fn(*args)
        best = min(best, time.perf_counter() - t)
    return round(best * 1e3, 3)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--contexts", default="1024,8192,32768")
    ap.add_argument("--batches", default="1,16")
    ap.add_argument("--prefill", type=int, default=256, help="queries of the prefill case (0: none)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--max-float-gib", type=float, default=0.6)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    cases = [("decode", b, c, 1) for c in map(int, args.contexts.split(",")) for b in map(int, args.batches.split(","))]
    if args.prefill:
        cases += [("prefill", 1, c, args.prefill) for c in map(int, args.contexts.split(","))]
    report = {"threads": args.threads, "heads": HEADS, "kv_heads": KV_HEADS, "head_dim": HEAD_DIM, "cases": []}
    for kind, batch, context, queries in cases:
        pool, q, index, mask = setup(batch, context, queries)
        row = {"kind": kind, "batch": batch, "context": context, "queries": queries,
               "fused_ms": best_ms(fused, (pool, q, index, mask), args.reps)}
        float_gib = batch * context * KV_HEADS * HEAD_DIM * 4 * 2 / 2**30
        if float_gib <= args.max_float_gib:
            row["dequantize_ms"] = best_ms(dequantize_then_sdpa, (pool, q, index, mask), args.reps)
            row["ratio"] = round(row["dequantize_ms"] / row["fused_ms"], 2)
            diff = fused(pool, q, index, mask) - dequantize_then_sdpa(pool, q, index, mask)
            row["max_abs_diff"] = float(diff.abs().max())
        else:
            row["dequantize_skipped"] = f"float K/V would be {float_gib:.2f} GiB"
        if queries == 1 and paged_decode.misfit(pool) is None and paged_decode.built():
            row["kernel_ms"] = best_ms(kernel, (pool, q, index, mask), args.reps)
            row["kernel_vs_fused"] = round(row["fused_ms"] / row["kernel_ms"], 2)
            if "dequantize_ms" in row:
                row["kernel_vs_dequantize"] = round(row["dequantize_ms"] / row["kernel_ms"], 2)
            row["kernel_max_abs_diff"] = float((kernel(pool, q, index, mask) - fused(pool, q, index, mask)).abs().max())
        report["cases"].append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)
        del pool
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
