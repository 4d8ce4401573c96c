"""Block-sparse decode rows' plan in C (`sparse_decode.c`): for rows of one query each, the blocks
each kv head reads (`sparse.select`), the slots and mask it reads them by (`sparse._reads`), and
the queries attended over the unread blocks' group means (`sparse.rest`, `sparse._attend_rest`),
in one call per layer instead of some hundred PyTorch operations. The same plan as those
functions (a test holds them equal); `sparse.attend` takes it for decode rows whose keys the
paged C kernel reads, and the kernel folds the means' attention into its own (`prior`).

It does not do prefill query blocks (many queries per row: PyTorch's matrix products serve them),
summaries in other dtypes than float32 (a GPU's bfloat16 pool), or the attention itself. What it
saves per decode step: docs/benchmarks.md."""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path

import numpy as np
import torch

from tempering.engine.cpu import native
from tempering.engine.kv_cache import KVPool

SOURCE = Path(__file__).with_suffix(".c")
SPLIT_BLOCKS = 1 << 14  # (row, kv head) pairs x blocks under this stay on one thread: a hand-off costs ~50 us


class _Args(ctypes.Structure):
    """sparse_decode.c's Args."""
    _fields_ = [(name, ctypes.c_void_p) for name in ("q", "kmax", "kmin", "ksum", "vsum", "tables", "nblocks", "pos",
                                                     "slots", "mask", "rest_out", "rest_lse")] + [
        (name, ctypes.c_int64) for name in ("kvh", "rep", "d", "width", "bs", "sinks", "local", "topk", "s", "g",
                                            "groups")]


@functools.lru_cache(maxsize=1)
def _kernel():
    """The built `plan`, or None (with one warning) where it cannot be built here."""
    return native.rows_function(SOURCE, "plan", _Args, "block-sparse decode plans in PyTorch (slower)")


def misfit(pool: KVPool) -> str | None:
    """Why decode rows over this pool cannot be planned here, or None where they can: a CPU pool
    with float32 block summaries (the kernel aside: `built`)."""
    if pool.device.type != "cpu":
        return f"a {pool.device.type} pool"
    if not pool.summarised or pool.k_min[0].dtype != torch.float32:
        return "no float32 block summaries"
    return None


def built() -> bool:
    """Whether the plan's kernel is built here (built on the first call; one warning where it cannot be)."""
    return _kernel() is not None


def plan(spec, pool: KVPool, layer: int, q: torch.Tensor, tables: torch.Tensor, num_blocks: torch.Tensor,
         positions: torch.Tensor, groups: int, per_group: int):
    """q [R, H, D] (one query per row), tables [R, W], num_blocks [R], positions [R] -> slots
    [R * KVH, K] (`HeadsApart` slots, K = S * block_size), mask [R * KVH, K] bool, and the
    queries attended over their unread blocks' `groups` group means of `per_group` blocks (the
    output [R, H, D] and log-sum-exp [R, H], as `sparse._attend_rest`; -inf where a row has
    none), or None where `groups` is 0. `spec` is a `sparse.SparseSpec`; S, the columns read, is
    min(spec.blocks, W)."""
    rows, width = tables.shape
    kvh, d, bs = pool.kv_heads, pool.head_dim, pool.block_size
    s = min(spec.blocks, width)
    q = q.float().contiguous()
    tables, num_blocks = tables.to(torch.int64).contiguous(), num_blocks.to(torch.int64).contiguous()
    positions = positions.to(torch.int64).contiguous()
    slots = torch.empty(rows * kvh, s * bs, dtype=torch.int64)
    mask = torch.empty(rows * kvh, s * bs, dtype=torch.bool)
    heads = q.shape[1]
    rest = (torch.empty(rows, heads, d), torch.empty(rows, heads)) if groups else None
    k_max, k_min = pool.k_max[layer], pool.k_min[layer]  # contiguous: made so, updated in place
    ptr = lambda t: None if t is None else t.data_ptr()  # noqa: E731
    a = _Args(q.data_ptr(), k_max.data_ptr(), k_min.data_ptr(), ptr(pool.k_sum[layer] if groups else None),
              ptr(pool.v_sum[layer] if groups else None), tables.data_ptr(), num_blocks.data_ptr(), positions.data_ptr(),
              slots.data_ptr(), mask.data_ptr(), *(ptr(t) for t in (rest or (None, None))),
              kvh, heads // kvh, d, width, bs, spec.sinks, spec.local, spec.topk, s, per_group, groups)
    units = rows * kvh  # (row, kv head) pairs, planned independently: one long row's heads split too
    parts = min(torch.get_num_threads(), units, max(1, units * width // SPLIT_BLOCKS))
    floats = (2 * d + 1) * groups + max(width, groups)
    scratch = [np.empty(16 * s + 4 * floats + width, np.uint8) for _ in range(parts)]  # see plan() in the C file
    kernel = _kernel()

    def run(part: int, lo: int, hi: int) -> None:
        kernel(ctypes.byref(a), scratch[part].ctypes.data, lo, hi)

    native.split_rows(run, units, parts, "sparse_decode")
    return slots, mask, rest
