"""Decode attention read straight from a paged KV pool on CPU (float32 or int8), compiled with numba.

`attend(pool, layer, q, index, mask)` is the attention of a few queries per row over that row's
pool slots (a step's decode rows, or block-sparse decode rows: one query per sequence and query
head), the same as SDPA over `KVPool.gather`'s keys and values, without the gather: one pass over
each row's keys, in slot order, reads a slot's keys and values for every kv head and folds them
into a running softmax (the flash-decoding recurrence: a running max per query, the sum and the
weighted values rescaled when the max grows). So each stored key and value is read once, from the
pool, and nothing context-sized is written. A kv head's query heads share the key they read (GQA
without copies). An int8 pool is read as stored: the key's fp16 scale multiplies its score and
the value's scale its weight (q . (k8 s) = (q . k8) s), so the result is dequantize-then-attend's
up to fp32 rounding. Rows are independent: with more than one torch thread, a large read is split
into runs of rows on that many threads (the kernel releases the GIL).

Measured (64 rows of 200-320 keys in random 4-slot blocks, 6 query heads over 2 kv heads,
head_dim 64, 1 thread, one layer): 4.9-5.6 ms against 10.1-10.7 ms for `index_select` + SDPA,
results within 1e-6. About half of the kernel's time is its arithmetic (the same rows over
slots that stay in cache take 2.4-3.0 ms), the rest reading the pool. Over an int8 pool it takes
about as long as over float32 (5.1 ms; `int8_attention`'s chunked two passes 8.6 ms,
dequantize + SDPA 16.7 ms); at 1 row of 8,192 keys 0.96 ms against 2.75 and 3.85 ms. Not used,
all slower on the pool: a tiled variant (the scores of 16 slots, then their weights, then their
values; faster in cache), the same with a polynomial exp the compiler vectorizes, and two passes
per row (all its scores, one vectorized exp, then the values); with 16-slot blocks, the head dim
and query heads per kv head as compile-time constants, 512-bit vectors (LLVM picks 256 on this
CPU) and an inlined exp gained nothing measurable either. On bench/engine.py's case c the kernel
is bound by its arithmetic, not its reads: over an int8 pool (a quarter of the bytes) it takes
as long as over float32 (3.0 and 3.1 s of about 13), about 26 ns per query head and key, of
which the exp is a fifth and the running max's rescale a seventh.

What it does not do: float16/bfloat16 pools (numba has no such CPU type; `gather` + SDPA reads
them), devices other than the CPU (a GPU keeps `gather` + SDPA), or many queries over the same
keys (prefill chunks, the n samples' queries over their shared prefix: SDPA's matrix kernels win
there; the kernel took b-long, 16 samples of a 1,024-token prompt, from 290 to 228 tokens per CPU
second when it read the shared prefix too). Where numba cannot be imported, the engine keeps
`gather` + SDPA (`int8_attention` for long int8 reads). The compiled kernel is cached on disk by
numba (`cache=True`), so only a machine's first engine pays its compile (a few seconds).
"""

from __future__ import annotations

import functools
import math
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch

from tempering.engine.kv_cache import KVPool

ENABLED = True  # tests turn it off to compare with gather + SDPA
SPLIT_KEYS = 4096  # a read of fewer keys (rows x keys) stays on one thread: a hand-off costs ~50 us
# every float16 bit pattern as float32: an int8 pool's fp16 scales are read through it (numba
# has no float16 type on the CPU), exactly
_HALF = np.arange(1 << 16, dtype=np.uint16).view(np.float16).astype(np.float32)


@functools.lru_cache(maxsize=1)
def _kernel():
    """The compiled kernel, or None where numba is not installed (imported on first use: numba's
    import costs about half a second that a GPU engine need not pay)."""
    try:
        import numba
    except ImportError:
        return None

    # fast-math without "no infinities / NaNs" (the running max starts at -inf): reassociation is
    # what vectorizes the dot products. `ks is None` (a float32 pool) is pruned at compile time.
    @numba.njit(fastmath={"reassoc", "contract", "nsz", "arcp", "afn"}, cache=True, nogil=True)
    def decode(q, kp, vp, ks, vs, half, index, mask, out, lse, scale, r0, r1):  # pragma: no cover - compiled
        _, kvh, rep, d = q.shape
        acc = np.empty((kvh, rep, d), np.float32)
        top = np.empty((kvh, rep), np.float32)
        total = np.empty((kvh, rep), np.float32)
        for r in range(r0, r1):
            acc[:] = 0.0
            top[:] = -np.inf
            total[:] = 0.0
            for j in range(index.shape[1]):
                if not mask[r, j]:
                    continue
                slot = index[r, j]
                for h in range(kvh):
                    kr, vr = kp[slot, h], vp[slot, h]
                    k_scale, v_scale = scale, np.float32(1.0)
                    if ks is not None:  # int8: the fp16 scales' bits, looked up
                        k_scale = scale * half[ks[slot, h, 0] & 0xFFFF]
                        v_scale = half[vs[slot, h, 0] & 0xFFFF]
                    for p in range(rep):
                        qp, ap = q[r, h, p], acc[h, p]
                        s = np.float32(0.0)
                        for x in range(d):
                            s += qp[x] * np.float32(kr[x])
                        s *= k_scale
                        if s > top[h, p]:  # a new max: rescale what was summed under the old one
                            c = np.float32(math.exp(top[h, p] - s))
                            total[h, p] *= c
                            for x in range(d):
                                ap[x] *= c
                            top[h, p] = s
                        w = np.float32(math.exp(s - top[h, p]))
                        total[h, p] += w
                        w *= v_scale
                        for x in range(d):
                            ap[x] += w * np.float32(vr[x])
            for h in range(kvh):
                for p in range(rep):
                    inv = np.float32(1.0) / total[h, p]
                    for x in range(d):
                        out[r, h, p, x] = acc[h, p, x] * inv
                    lse[r, h, p] = top[h, p] + math.log(total[h, p])

    return decode


STALL_S = 600.0  # a run of rows on a pool thread taking longer than this is a stall, not work
_workers: list[tuple[int, int, ThreadPoolExecutor]] = []  # at most one: (pid, threads, the pool)


def _threads(count: int) -> ThreadPoolExecutor:
    """`count` threads that run runs of rows while the calling thread runs the first run: a new
    pool when torch's thread count has grown, and in a forked child (whose copy of the parent's
    pool has no threads and would never run what it is given)."""
    pid = os.getpid()
    if _workers and _workers[0][0] == pid and _workers[0][1] >= count:
        return _workers[0][2]
    if _workers:
        owner, _, old = _workers.pop()
        if owner == pid:  # a parent's copy is left alone: its threads are not this process's
            old.shutdown(wait=False)
    _workers.append((pid, count, ThreadPoolExecutor(count, thread_name_prefix="paged-decode")))
    return _workers[0][2]


def use(pool: KVPool) -> bool:
    """Whether decode reads of this pool go through `attend`: a float32 or int8 pool on the CPU,
    numba installed, and `ENABLED`."""
    return (ENABLED and pool.device.type == "cpu" and (pool.quantized or pool.dtype == torch.float32)
            and _kernel() is not None)


def attend(pool: KVPool, layer: int, q: torch.Tensor, index: torch.Tensor,
           mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """q [R, KVH, rep, D] (row r's queries of each kv head), index [R, K] pool slots, mask [R, K]
    bool (True = attend; each row attends to at least one key) -> the output [R, KVH, rep, D]
    and the log-sum-exp of the scaled scores [R, KVH, rep], float32."""
    rows, kvh, rep, d = q.shape
    index, mask = index.contiguous(), mask.contiguous()
    ks = vs = None
    if pool.quantized:
        k, v, k_scale, v_scale = pool.quantized_layer(layer, index.reshape(-1))
        ks, vs = k_scale.view(torch.int16).numpy(), v_scale.view(torch.int16).numpy()
    else:
        k, v = pool.stored(layer, index.reshape(-1))
    out = q.new_empty(rows, kvh, rep, d, dtype=torch.float32)
    lse = q.new_empty(rows, kvh, rep, dtype=torch.float32)
    args = (q.float().contiguous().numpy(), k.numpy(), v.numpy(), ks, vs, _HALF, index.numpy(), mask.numpy(),
            out.numpy(), lse.numpy(), np.float32(1.0 / math.sqrt(d)))
    kernel = _kernel()
    parts = min(torch.get_num_threads(), rows, max(1, index.numel() // SPLIT_KEYS))
    if parts == 1:
        kernel(*args, 0, rows)
        return out, lse
    bounds = [rows * i // parts for i in range(parts + 1)]
    threads = _threads(parts - 1)
    others = [threads.submit(kernel, *args, lo, hi) for lo, hi in zip(bounds[1:-1], bounds[2:])]
    kernel(*args, bounds[0], bounds[1])
    for f in others:
        try:
            f.result(timeout=STALL_S)
        except TimeoutError:
            raise TimeoutError(f"paged_decode: a run of rows on a pool thread stalled for {STALL_S:.0f} s") from None
    return out, lse
