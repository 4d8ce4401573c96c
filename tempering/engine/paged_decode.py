"""Decode attention read straight from a paged KV pool on CPU (float32, bfloat16, float16 or int8),
a C kernel (`paged_decode.c`) built with the machine's C compiler on first use.

`attend(pool, layer, q, index, mask)` is the attention of a few queries per row over that row's
pool slots (a step's decode rows, or block-sparse decode rows: one query per sequence and query
head), the same as SDPA over `KVPool.gather`'s keys and values, without the gather (a step's
decode rows keep one `Reader` for all its layers: the index, mask and kernel arguments made once,
each layer's call only points the kernel at its queries, keys and values): one pass over
each row's keys, in slot order, in chunks of 8 or 16 live slots (one vector of floats: 16 with
AVX-512, else 8), each folded into a running softmax (the flash-decoding recurrence: a running max
per query, the sum and the weighted values rescaled when the max grows). So each stored key and
value is read once, from the pool, and nothing context-sized is written. A kv head's query heads
share the keys they read (GQA without copies). An int8 pool is read as stored, times the key's and
the value's fp16 scales; 16-bit pools are widened to float32 as read. The arithmetic is float32, so
the result is SDPA over the gathered (dequantized) keys and values up to float32 rounding. Rows are
independent: with more than one torch thread, a large read is split into runs of rows on that many
threads (ctypes releases the GIL for the call).

The kernel computes a chunk's scores of a query head as one vector (the dot products' lanes
summed by pairwise halving as they are made, not one horizontal sum per key), then one max, one
rescale and the exps (a polynomial) as vectors; before each query head it prefetches a share of
the next chunk's cache lines. Measured on an AVX2 machine (64 rows x 256 keys in random 16-slot
blocks, 6 query heads over 2 kv heads, head_dim 64, 8 layers of pool, 1 thread, from C, best
of 15): 1.8-2.3 ms a layer, where the kernel of 16-float vectors it replaces took 5.7-6.6
(its 16 partial sums spilled AVX2's 16 registers), the 8-float kernel without prefetch 3.1-4.1,
and reading the same keys and values alone 1.2-1.4; 1.2-1.3 ms with the keys in cache. On an
AVX-512 machine the 16-float kernel took 1.0-1.2 ms in cache, 2.7-3.2 from memory (before this
tree order and the prefetch, which the earlier kernel's build had silently dropped; not measured
there since). Since then a float32 chunk's pointers are made inline with no per-slot dtype test,
and the prefetch walks the next chunk's lines with a cursor (it had cost two integer divisions
per query head): 4-8% less from memory, 13% less in cache (the two builds alternating in one
process; the same workload's in-cache reads are compute-bound at about 1.0 ms here). Where
the CPU has F16C, float16 values and int8 scales are widened by its conversion instruction:
a float16 pool 3.0 -> 1.5 ms, an int8 one 3-4% less. 16-bit and int8 rows are now widened by
each vector load (x86's conversion instructions where built, else vector extensions or plain C)
instead of into a buffer per chunk, and an int8 row's scale multiplies its score and its value's
weight rather than its elements (the chunk's dot products also go side by side, a head-dim vector
at a time, which changed nothing for float32): from memory float16 1.57 -> 1.25 ms and int8 1.80
-> 1.50, in cache 1.33 -> 1.04 and 1.50 -> 1.22, float32 unchanged at 1.64 and 0.98 (the builds
alternating in one process, 12 rounds, best call). Float16 now reads in 0.76x float32's time.

Building: `native` compiles it on first use and caches it per machine; where no compiler
builds it, `use` is False with one warning, and the engine keeps `gather` + SDPA
(`int8_attention` for long int8 reads).

What it does not do: head dims that are not a multiple of 16 (they gather), devices other than
the CPU (a GPU keeps `gather` + SDPA), or many queries over the same keys (prefill chunks, the n
samples' queries over their shared prefix: SDPA's matrix kernels win there; the numba kernel
took b-long, 16 samples of a 1,024-token prompt, from 290 to 228 tokens per CPU second when it
read the shared prefix too).
"""

from __future__ import annotations

import ctypes
import functools
import math
from pathlib import Path

import numpy as np
import torch

from tempering.engine import native
from tempering.engine.kv_cache import KVPool

ENABLED = True  # tests turn it off to compare with gather + SDPA
SPLIT_KEYS = 4096  # a read of fewer keys (rows x keys) stays on one thread: a hand-off costs ~50 us
SOURCE = Path(__file__).with_suffix(".c")
_DTYPES = {torch.float32: 0, torch.bfloat16: 2, torch.float16: 3}  # paged_decode.c's; int8 pools: 1


class _Args(ctypes.Structure):
    """paged_decode.c's Args."""
    _fields_ = [(name, ctypes.c_void_p) for name in ("q", "k", "v", "ks", "vs", "index", "mask", "out", "lse")] + [
        (name, ctypes.c_int64) for name in ("kvh", "rep", "d", "keys")] + [
        ("scale", ctypes.c_float), ("dtype", ctypes.c_int32), ("prior_out", ctypes.c_void_p),
        ("prior_lse", ctypes.c_void_p)]


@functools.lru_cache(maxsize=1)
def _kernel():
    """The built kernel's `decode`, or None (with one warning) where it cannot be built here."""
    return native.rows_function(SOURCE, "decode", _Args, "decode attention gathers instead (slower)")


def use(pool: KVPool) -> bool:
    """Whether decode reads of this pool go through `attend`: a float32, bfloat16, float16 or int8
    pool on the CPU, a head dim that is a multiple of 16, the kernel built, and `ENABLED`."""
    return (ENABLED and pool.device.type == "cpu" and (pool.quantized or pool.store_dtype in _DTYPES)
            and pool.head_dim % 16 == 0 and _kernel() is not None)


def attend(pool: KVPool, layer: int, q: torch.Tensor, index: torch.Tensor, mask: torch.Tensor,
           prior: tuple[torch.Tensor, torch.Tensor] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """q [R, KVH, rep, D] (row r's queries of each kv head), index [R, K] pool slots, mask [R, K]
    bool (True = attend; each row attends to at least one key) -> the output [R, KVH, rep, D]
    and the log-sum-exp of the scaled scores [R, KVH, rep], float32. With `prior` (an output and
    log-sum-exp of the same shapes, over other keys; -inf where none), the attention over both
    sets of keys, as `partial_attention.merge` of the two would give. Only where `use(pool)`."""
    return Reader(pool, index, mask).read(layer, q, prior=prior)


class Reader:
    """`attend` over one set of rows' slots (`index`, `mask`), for every layer of a step: what
    does not change from layer to layer (the index and mask as the kernel reads them, the
    kernel's arguments, its scratch, the split into runs of rows) is made once, so each layer's
    call only points the kernel at its queries, keys and values. Measured on c of
    `bench/engine.py` (1,168 layer calls, the kernel 1.2 CPU s in all): the Python around the
    kernel took 0.31 CPU s a run before, 0.17 with this."""

    def __init__(self, pool: KVPool, index: torch.Tensor, mask: torch.Tensor):
        self.pool, self.rows, self.keys = pool, index.shape[0], index.shape[1]
        self.index, self.mask = index.to(torch.int64).contiguous(), mask.contiguous()
        self.flat = self.index.view(-1)
        kvh, d = pool.kv_heads, pool.head_dim
        self.args = _Args(None, None, None, None, None, self.index.data_ptr(), self.mask.data_ptr(), None, None,
                          kvh, 0, d, self.keys, 1.0 / math.sqrt(d), 1 if pool.quantized else _DTYPES[pool.store_dtype])
        self.parts = min(torch.get_num_threads(), self.rows, max(1, self.index.numel() // SPLIT_KEYS))
        self.scratch: list[np.ndarray] = []  # one per run of rows, and their addresses
        self.scratch_at: list[int] = []

    def read(self, layer: int, q: torch.Tensor, out: torch.Tensor | None = None,
             prior: tuple[torch.Tensor, torch.Tensor] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """q [R, KVH, rep, D] -> (out, lse) as `attend` (with its `prior`); `out`, when given, is
        written in place (a contiguous float32 [R, KVH, rep, D])."""
        rows, kvh, rep, d = q.shape
        if rows != self.rows or kvh != self.pool.kv_heads or d != self.pool.head_dim:
            raise ValueError(f"paged_decode: queries {tuple(q.shape)} do not fit {self.rows} rows of "
                             f"{self.pool.kv_heads} kv heads x {self.pool.head_dim}")
        q = q.float().contiguous()
        if self.pool.quantized:
            k, v, k_scale, v_scale = self.pool.quantized_layer(layer, self.flat)
            self.args.ks, self.args.vs = k_scale.data_ptr(), v_scale.data_ptr()
        else:
            k, v = self.pool.stored(layer, self.flat)
        if out is None:
            out = q.new_empty(rows, kvh, rep, d)
        lse = q.new_empty(rows, kvh, rep)
        a = self.args
        a.q, a.k, a.v, a.out, a.lse, a.rep = q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), lse.data_ptr(), rep
        if prior is not None:  # folded in by the kernel: its running softmax starts from it
            prior = tuple(t.float().contiguous() for t in prior)
            if prior[0].shape != q.shape or prior[1].shape != q.shape[:3]:
                raise ValueError(f"paged_decode: a prior of {[tuple(t.shape) for t in prior]} for queries {tuple(q.shape)}")
        a.prior_out, a.prior_lse = (None, None) if prior is None else (prior[0].data_ptr(), prior[1].data_ptr())
        size = kvh * rep * d  # the heads' running outputs
        if not self.scratch or self.scratch[0].size < size:
            self.scratch = [np.empty(size, np.float32) for _ in range(self.parts)]
            self.scratch_at = [s.ctypes.data for s in self.scratch]
        kernel, scratch = _kernel(), self.scratch_at

        def run(part: int, lo: int, hi: int) -> None:
            if kernel(ctypes.byref(a), scratch[part], lo, hi) != 0:
                raise ValueError(f"paged_decode: head dim {d} is not a multiple of 16")

        native.split_rows(run, rows, self.parts, "paged_decode")
        return out, lse
