"""Decode attention read straight from a float32 paged KV pool on CPU, compiled with numba.

`attend(pool, layer, q, index, mask)` is the attention of a few queries per row over that row's
pool slots (a decode bucket's rows: one query per sequence and query head), the same as SDPA
over `KVPool.gather`'s keys and values, without the gather: one pass over each row's keys, in
slot order, reads a slot's keys and values for every kv head and folds them into a running
softmax (the flash-decoding recurrence: a running max per query, the sum and the weighted
values rescaled when the max grows). So each stored key and value is
read once, from the pool, and nothing context-sized is written. A kv head's query heads share
the key they read (GQA without copies).

Measured (64 rows of 200-320 keys in random 4-slot blocks, 6 query heads over 2 kv heads,
head_dim 64, 1 thread, one layer): 4.9-5.6 ms against 10.1-10.7 ms for `index_select` + SDPA,
results within 1e-6. About half of the kernel's time is its arithmetic (the same rows over
slots that stay in cache take 2.4-3.0 ms), the rest reading the pool. A tiled variant (the
scores of 16 slots, then their weights, then their values) was faster in cache (1.9 against 3.2 ms) and
slower on the pool (6.2 against 5.0 ms, the two measured in turn in one process): not used.

What it does not do: float16/bfloat16 or int8 pools (`int8_attention` reads those), devices
other than the CPU (a GPU keeps `gather` + SDPA), many queries over the same keys (prefill
chunks, the n samples' queries over their shared prefix: SDPA's matrix kernels win there; the
kernel took b-long, 16 samples of a 1,024-token prompt, from 290 to 228 tokens per CPU second
when it read the shared prefix too), or threads (it runs on the calling thread; rows are
independent, so a parallel loop over them is the next step). Where numba cannot be imported,
the engine keeps `gather` + SDPA. The compiled kernel is cached on disk by numba (`cache=True`), so only a
machine's first engine pays its compile (about 2 s).
"""

from __future__ import annotations

import functools
import math

import numpy as np
import torch

from tempering.engine.kv_cache import KVPool

ENABLED = True  # tests turn it off to compare with gather + SDPA


@functools.lru_cache(maxsize=1)
def _kernel():
    """The compiled kernel, or None where numba is not installed (imported on first use: numba's
    import costs about half a second that a GPU or int8 engine need not pay)."""
    try:
        import numba
    except ImportError:
        return None

    # fast-math without "no infinities / NaNs" (the running max starts at -inf): reassociation is
    # what vectorizes the dot products
    @numba.njit(fastmath={"reassoc", "contract", "nsz", "arcp", "afn"}, cache=True, nogil=True)
    def decode(q, kp, vp, index, mask, out, lse, scale):  # pragma: no cover - compiled
        rows, kvh, rep, d = q.shape
        acc = np.empty((kvh, rep, d), np.float32)
        top = np.empty((kvh, rep), np.float32)
        total = np.empty((kvh, rep), np.float32)
        for r in range(rows):
            acc[:] = 0.0
            top[:] = -np.inf
            total[:] = 0.0
            for j in range(index.shape[1]):
                if not mask[r, j]:
                    continue
                slot = index[r, j]
                for h in range(kvh):
                    kr, vr = kp[slot, h], vp[slot, h]
                    for p in range(rep):
                        qp, ap = q[r, h, p], acc[h, p]
                        s = np.float32(0.0)
                        for x in range(d):
                            s += qp[x] * kr[x]
                        s *= scale
                        if s > top[h, p]:  # a new max: rescale what was summed under the old one
                            c = np.float32(math.exp(top[h, p] - s))
                            total[h, p] *= c
                            for x in range(d):
                                ap[x] *= c
                            top[h, p] = s
                        w = np.float32(math.exp(s - top[h, p]))
                        total[h, p] += w
                        for x in range(d):
                            ap[x] += w * vr[x]
            for h in range(kvh):
                for p in range(rep):
                    inv = np.float32(1.0) / total[h, p]
                    for x in range(d):
                        out[r, h, p, x] = acc[h, p, x] * inv
                    lse[r, h, p] = top[h, p] + math.log(total[h, p])

    return decode


def use(pool: KVPool) -> bool:
    """Whether decode reads of this pool go through `attend`: a float32 pool on the CPU, numba
    installed, and `ENABLED`."""
    return (ENABLED and not pool.quantized and pool.device.type == "cpu" and pool.dtype == torch.float32
            and _kernel() is not None)


def attend(pool: KVPool, layer: int, q: torch.Tensor, index: torch.Tensor,
           mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """q [R, KVH, rep, D] (row r's queries of each kv head), index [R, K] pool slots, mask [R, K]
    bool (True = attend; each row attends to at least one key) -> the output [R, KVH, rep, D]
    and the log-sum-exp of the scaled scores [R, KVH, rep]."""
    rows, kvh, rep, d = q.shape
    k, v = pool.stored(layer, index.reshape(-1))
    out = q.new_empty(rows, kvh, rep, d)
    lse = q.new_empty(rows, kvh, rep)
    _kernel()(q.contiguous().numpy(), k.numpy(), v.numpy(), index.contiguous().numpy(),
              mask.contiguous().numpy(), out.numpy(), lse.numpy(), np.float32(1.0 / math.sqrt(d)))
    return out, lse
