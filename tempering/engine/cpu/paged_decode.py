"""Decode attention read straight from a paged KV pool on CPU (float32, bfloat16, float16 or int8),
a C kernel (`paged_decode.c`) built with the machine's C compiler on first use.

`attend(pool, layer, q, index, mask)` equals SDPA over `KVPool.gather`'s keys and values, without
the gather: one pass over each row's slots in chunks of one vector (16 floats with AVX-512, else
8), folded into a running softmax, each key and value read once as stored (16-bit and int8 widened
as loaded, an int8 row's scales on its score and its value's weight); a kv head's query heads share
the keys they read. A step's decode rows keep one `Reader` for all layers; with more torch
threads the rows are split into runs over them. Where no compiler builds it, `built()` is False
with one warning and the engine keeps gather + SDPA. It does not take head dims that are not a
multiple of 16, devices other than the CPU, or many queries over the same keys (prefill, shared
prefixes: SDPA's matrix kernels win there). Measured speeds: docs/benchmarks.md."""

from __future__ import annotations

import ctypes
import functools
import math
from pathlib import Path

import numpy as np
import torch

from tempering.engine.cpu import native
from tempering.engine.kv_cache import KVPool

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


def misfit(pool: KVPool) -> str | None:
    """Why `attend` cannot read this pool, or None where it can: a float32, bfloat16, float16 or
    int8 pool on the CPU with a head dim that is a multiple of 16 (the kernel aside: `built`)."""
    if pool.device.type != "cpu":
        return f"a {pool.device.type} pool"
    if not (pool.quantized or pool.store_dtype in _DTYPES):
        return f"a {str(pool.store_dtype).removeprefix('torch.')} pool"
    return None if pool.head_dim % 16 == 0 else f"head dim {pool.head_dim} is not a multiple of 16"


def built() -> bool:
    """Whether the kernel is built here (built on the first call; one warning where it cannot be)."""
    return _kernel() is not None


def attend(pool: KVPool, layer: int, q: torch.Tensor, index: torch.Tensor, mask: torch.Tensor,
           prior: tuple[torch.Tensor, torch.Tensor] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """q [R, KVH, rep, D] (row r's queries of each kv head), index [R, K] pool slots, mask [R, K]
    bool (True = attend; each row attends to at least one key) -> the output [R, KVH, rep, D]
    and the log-sum-exp of the scaled scores [R, KVH, rep], float32. With `prior` (an output and
    log-sum-exp of the same shapes, over other keys; -inf where none), the attention over both
    sets of keys, as `partial_attention.merge` of the two would give. Only where the pool fits
    (`misfit` is None) and the kernel is `built`."""
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
