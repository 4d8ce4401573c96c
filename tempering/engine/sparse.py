"""Block-sparse attention over the paged KV cache: each query row reads the sink blocks, the
local blocks, and the `topk` other blocks its queries score highest, never the whole context.

A row is one decode query, or one block of a prefill chunk's queries (`block_size` consecutive
positions of one sequence). KV blocks are the pool's pages. Each block's keys are summarised by
their elementwise min and max (`KVPool` keeps them per layer as keys are written), which bound
q . k for every key of the block from above (Quest's bound: sum over d of max(q_d min_d,
q_d max_d)), summed over the query heads; a row of several queries takes, per dimension, the
largest positive and the most negative of its queries' values, which bounds every one of them. The row then attends to the union of its sink blocks (the sequence's
first), local blocks (the one holding its last query and those before it) and top-k blocks,
with the causal mask; a row whose context has no more blocks than that union reads all of them,
so with `topk` covering every block this is dense attention (a test). Reading costs
`(sinks + local + topk) * block_size` keys per row at any length; scoring costs one bound per
block, `1 / block_size` of dense attention's q . k work. Decode rows read their selected blocks
straight from a float32 or int8 pool on the CPU (`paged_decode`); elsewhere an int8 pool's blocks
are read as stored for long decode reads (`int8_attention.use`), not dequantized.

It neither decides which layers are sparse (the engine's `sparse_layers`) nor what runs in a
step (the scheduler).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from tempering.engine import int8_attention, paged_decode
from tempering.engine.kv_cache import KVPool


@dataclass(frozen=True)
class SparseSpec:
    topk: int  # blocks chosen by score per row
    sinks: int = 1  # the sequence's first blocks, always read
    local: int = 2  # the row's own block and those just before it, always read

    @property
    def blocks(self) -> int:
        return self.sinks + self.local + self.topk


@dataclass
class SparseRows:
    """Query rows of one step that attend block-sparsely (decode rows, or prefill query blocks)."""
    tokens: torch.Tensor  # [R, Q] the rows' query tokens in the step's flat row; -1 = padding
    positions: torch.Tensor  # [R, Q] their positions in their sequences (padding: -1)
    tables: torch.Tensor  # [R, W] each row's sequence's block table (padded with 0)
    num_blocks: torch.Tensor  # [R] blocks holding the row's context (up to its last query)


def select(spec: SparseSpec, pool: KVPool, layer: int, q: torch.Tensor, rows: SparseRows) -> torch.Tensor:
    """q [R, Q, H, D] (each row's queries; padding rows of Q are zero) -> [R, S] table indices of
    the blocks each row reads, S = min(spec.blocks, W); -1 where a row has fewer blocks than S.
    A block's score bounds q . k over the row's queries and its keys, summed over the query heads."""
    r, nq, heads, d = q.shape
    kvh = pool.kv_heads
    width = rows.tables.shape[1]
    j = torch.arange(width, device=q.device)[None, :]
    n = rows.num_blocks[:, None]
    valid = j < n
    always = (j < spec.sinks) | ((j >= n - spec.local) & valid)
    s = min(spec.blocks, width)
    if spec.topk > 0 and width > spec.sinks + spec.local:
        # sum_d max(q_d lo_d, q_d hi_d) = q+ . hi + q- . lo; over all of a row's queries at once:
        # the largest q+ and the smallest q- of each dimension (still a bound for every query)
        real = (rows.tokens >= 0)[:, :, None, None]
        qf = q.float()
        # summed over a kv head's query heads first: sum_x sum_d q_xd k_d = sum_d (sum_x q_xd) k_d
        top = qf.clamp(min=0).masked_fill(~real, 0).amax(1).view(r, kvh, heads // kvh, d).sum(2).view(r, -1)
        bottom = qf.clamp(max=0).masked_fill(~real, 0).amin(1).view(r, kvh, heads // kvh, d).sum(2).view(r, -1)
        if r > 1 and bool((rows.tables == rows.tables[0]).all()):
            # the query blocks of one prefill chunk share their sequence's table: one [W, KVH * D]
            # summary for all rows, not a copy per row (R times the bytes, quadratic in length)
            lo, hi = (t[layer][rows.tables[0]].float().view(width, -1) for t in (pool.k_min, pool.k_max))
            score = top @ hi.T + bottom @ lo.T
        else:
            lo, hi = (t[layer][rows.tables].float().view(r, width, -1) for t in (pool.k_min, pool.k_max))
            score = torch.einsum("rk,rwk->rw", top, hi) + torch.einsum("rk,rwk->rw", bottom, lo)
    else:
        score = torch.zeros(r, width, device=q.device)
    score = torch.where(always, torch.inf, score).masked_fill_(~valid, -torch.inf)
    top, chosen = score.topk(s, dim=1)
    return torch.where(top > -torch.inf, chosen, -1)


def attend(spec: SparseSpec, pool: KVPool, layer: int, q: torch.Tensor, rows: SparseRows) -> torch.Tensor:
    """q [H, N, D] (the step's queries) -> [R, Q, H, D]: each row's queries attended over the
    blocks `select` picks for it (padding rows of Q are garbage, never read back)."""
    heads, _, d = q.shape
    bs, kvh = pool.block_size, pool.kv_heads
    taken = rows.tokens.clamp(min=0)
    qr = q[:, taken].permute(1, 0, 2, 3)  # [R, H, Q, D]
    chosen = select(spec, pool, layer, qr.transpose(1, 2), rows)  # [R, S]
    r, s = chosen.shape
    block = rows.tables.gather(1, chosen.clamp(min=0))  # pool block ids
    offsets = torch.arange(bs, device=q.device)
    slots = (block[:, :, None] * bs + offsets).reshape(r, s * bs)
    key_pos = (chosen[:, :, None] * bs + offsets).reshape(r, s * bs)
    readable = (chosen >= 0)[:, :, None].expand(r, s, bs).reshape(r, s * bs)
    # slots past the row's last query are never written yet (or hold another sequence's keys, or
    # the pool's uninitialised memory): zeroed, as a NaN there would reach the output through 0 x NaN
    written = readable & (key_pos <= rows.positions.max(1).values[:, None])  # [R, K]
    mask = written[:, None, :] & (key_pos[:, None, :] <= rows.positions[:, :, None])  # [R, Q, K]
    mask[:, :, 0] |= rows.positions < 0  # a padding query sees one key (its output is dropped)
    rep, nq = heads // kvh, qr.shape[2]
    if nq == 1 and paged_decode.use(pool):  # decode rows: masked slots are skipped, never read
        out, _ = paged_decode.attend(pool, layer, qr.reshape(r, kvh, rep, d), slots, mask[:, 0])
        return out.view(r, 1, heads, d)
    if int8_attention.use(pool, slots.numel(), prefill=nq > 1):  # masked int8 slots weigh 0 (finite)
        return int8_attention.attend(pool, layer, qr, slots, mask).transpose(1, 2)
    kk, vv = pool.gather(layer, slots.reshape(-1))
    zero = ~written.reshape(-1, 1, 1)
    kk = kk.masked_fill_(zero, 0).view(r, s * bs, kvh, d).transpose(1, 2)  # in place: the pool's gather buffer
    vv = vv.masked_fill_(zero, 0).view(r, s * bs, kvh, d).transpose(1, 2)
    # A kv head's query heads act as more query rows (SDPA's GQA would copy the keys and values
    # once per query head): [R, KVH, rep * Q, D] against [R, KVH, K, D], the mask repeated.
    grouped = qr.reshape(r, kvh, rep * nq, d)
    mask = mask[:, None].expand(r, rep, nq, mask.shape[-1]).reshape(r, 1, rep * nq, -1)
    out = F.scaled_dot_product_attention(grouped, kk, vv, attn_mask=mask)
    return out.view(r, heads, nq, d).transpose(1, 2)  # [R, Q, H, D]
