"""Block-sparse attention over the paged KV cache: each query row reads the sink blocks, the
local blocks, and the `topk` other blocks its queries score highest, never the whole context.

A row is one decode query or one block of a prefill chunk's queries. Blocks are scored per kv
head by Quest's upper bound on q . k from each block's elementwise min and max keys (kept by
`KVPool`), and each kv head reads its own choice (`HeadsApart`). With `topk` covering every block
this is dense attention (tested). With `rest_group` > 0 the blocks a row does not read count as
one mean key and value per group of blocks, weighted by their number (NSA's compressed branch, by
mean pooling), from the pool's per-block sums, so a diffuse head keeps its average over the whole
context at a bounded cost per row. Decode rows are planned and read in C on the CPU
(`sparse_decode`, `paged_decode`). It neither decides which layers are sparse (the engine's
`sparse_layers`) nor what runs in a step (the scheduler)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from tempering.engine import int8_attention
from tempering.engine.cpu import paged_decode, sparse_decode
from tempering.engine.kv_cache import HeadsApart, KVPool
from tempering.engine.partial_attention import flash_with_lse, merge
from tempering.engine.plan import AttentionPlan


MAX_GROUPS = 64  # a row's unread blocks in at most this many groups (bounded cost per query at any length)


@dataclass(frozen=True)
class SparseSpec:
    topk: int  # blocks chosen by score per row
    sinks: int = 1  # the sequence's first blocks, always read
    local: int = 2  # the row's own block and those just before it, always read
    rest_group: int = 0  # > 0: unread blocks attended as one mean key per this many blocks; 0: dropped

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


def select(spec: SparseSpec, pool: KVPool, layer: int, q: torch.Tensor, rows: SparseRows,
           shared: bool | None = None) -> torch.Tensor:
    """q [R, Q, H, D] (each row's queries; padding rows of Q are zero) -> [R, KVH, S] table indices
    of the blocks each row reads through each kv head, in ascending order, S = min(spec.blocks, W);
    -1 (first) where a row has fewer blocks than S. A block's score for a kv head bounds q . k
    over the row's queries and the block's keys of that head, summed over the head's query
    heads: each kv head takes the blocks that matter to it (heads attend to different places),
    reading as many keys as one choice shared by the heads would."""
    r, nq, heads, d = q.shape
    kvh = pool.kv_heads
    width = rows.tables.shape[1]
    j = torch.arange(width, device=q.device)[None, None, :]
    n = rows.num_blocks[:, None, None]
    valid = j < n
    always = (j < spec.sinks) | ((j >= n - spec.local) & valid)
    s = min(spec.blocks, width)
    if spec.topk > 0 and width > spec.sinks + spec.local:
        # sum_d max(q_d lo_d, q_d hi_d) = q+ . hi + q- . lo; over all of a row's queries at once:
        # the largest q+ and the smallest q- of each dimension (still a bound for every query)
        real = (rows.tokens >= 0)[:, :, None, None]
        qf = q.float()
        # summed over a kv head's query heads first: sum_x sum_d q_xd k_d = sum_d (sum_x q_xd) k_d
        top = qf.clamp(min=0).masked_fill(~real, 0).amax(1).view(r, kvh, heads // kvh, d).sum(2)
        bottom = qf.clamp(max=0).masked_fill(~real, 0).amin(1).view(r, kvh, heads // kvh, d).sum(2)
        if shared if shared is not None else _shared(rows):  # one table for all rows: one summary
            # the query blocks of one prefill chunk share their sequence's table: one [W, KVH, D]
            # summary for all rows, not a copy per row (R times the bytes, quadratic in length)
            lo, hi = (t[layer][rows.tables[0]].float().transpose(0, 1) for t in (pool.k_min, pool.k_max))
            score = (top.transpose(0, 1) @ hi.transpose(1, 2) + bottom.transpose(0, 1) @ lo.transpose(1, 2))
            score = score.transpose(0, 1)  # [R, KVH, W]
        else:
            score = _block_scores(pool.k_max[layer], pool.k_min[layer], top, bottom, rows.tables)
    else:
        score = torch.zeros(r, kvh, width, device=q.device)
    score = torch.where(always, torch.inf, score).masked_fill_(~valid, -torch.inf)
    top, chosen = score.topk(s, dim=2)
    # in block order: the heads' sinks and local blocks then share their columns (`_reads`)
    return torch.where(top > -torch.inf, chosen, -1).sort(dim=2).values


def attend(spec: SparseSpec, pool: KVPool, layer: int, q: torch.Tensor, rows: SparseRows,
           plan: AttentionPlan) -> torch.Tensor:
    """q [H, N, D] (the step's queries) -> [R, Q, H, D]: each row's queries attended, through each
    kv head, over the blocks `select` picks for that head, and the rest of its blocks as their
    group means (`rest`) (padding rows of Q are garbage, never read back). Each (row, kv head)
    is read as a row of its own over the pool seen as one of a single kv head (`HeadsApart`),
    by the paths `plan` takes."""
    heads, _, d = q.shape
    bs, kvh = pool.block_size, pool.kv_heads
    rep = heads // kvh
    taken = rows.tokens.clamp(min=0)
    qr = q[:, taken].permute(1, 0, 2, 3)  # [R, H, Q, D]
    apart = HeadsApart(pool)
    if qr.shape[2] == 1 and plan.paged_decode and plan.sparse_decode:
        return _decode(spec, pool, layer, qr, rows, apart)
    shared = _shared(rows)  # looked at once for both
    chosen = select(spec, pool, layer, qr.transpose(1, 2), rows, shared)  # [R, KVH, S]
    unread = rest(spec, pool, layer, rows, chosen, shared)
    r, _, s = chosen.shape
    nq, keys = qr.shape[2], s * bs
    slots, written, mask = _reads(rows, chosen, bs)  # [R * KVH, K], and [R, K], [R, Q, K] for every kv head
    qh = qr.reshape(r * kvh, rep, nq, d)  # a kv head's query heads, a row of their own

    def done(out: torch.Tensor, lse: torch.Tensor | None) -> torch.Tensor:
        out = out.reshape(r, heads, nq, d)
        if unread is not None:
            out = merge(out, lse.reshape(r, heads, nq), *_attend_rest(qr, unread))
        return out.transpose(1, 2)  # [R, Q, H, D]

    if nq == 1 and plan.paged_decode:  # decode rows: masked slots are skipped, never read
        return done(*paged_decode.attend(apart, layer, qh.reshape(r * kvh, 1, rep, d), slots,
                                         mask[:, 0].repeat_interleave(kvh, 0)))
    if int8_attention.use(plan.int8_attention, slots.numel(), prefill=nq > 1):  # masked int8 slots weigh 0 (finite)
        return done(*int8_attention.attend(apart, layer, qh, slots, mask.repeat_interleave(kvh, 0), lse=True))
    kk, vv = apart.gather(layer, slots.reshape(-1))
    zero = ~written[:, None, :, None]
    kk = kk.view(r, kvh, keys, d).masked_fill_(zero, 0)  # in place: the pool's gather buffer
    vv = vv.view(r, kvh, keys, d).masked_fill_(zero, 0)
    # A kv head's query heads act as more query rows (SDPA's GQA would copy the keys and values
    # once per query head): [R, KVH, rep * Q, D] against [R, KVH, K, D], one mask for the heads.
    grouped = qh.reshape(r, kvh, rep * nq, d)
    mask = mask[:, None].expand(r, rep, nq, keys).reshape(r, 1, rep * nq, keys)
    bias = torch.where(mask, 0.0, -torch.inf).to(q.dtype)  # measured: SDPA runs faster with it than with bool
    if unread is None:
        return done(F.scaled_dot_product_attention(grouped, kk, vv, attn_mask=bias), None)
    if plan.flash_lse:  # merged by its lse
        return done(*flash_with_lse(grouped, kk, vv, attn_mask=bias))
    # the group means as more keys, weighted by their counts through the mask (one per kv head)
    kk = torch.cat([kk, unread.keys.to(kk.dtype)], 2)
    vv = torch.cat([vv, unread.values.to(vv.dtype)], 2)
    groups = unread.keys.shape[2]
    means = unread.bias[:, :, None, :].to(q.dtype).expand(r, kvh, rep * nq, groups)
    out = F.scaled_dot_product_attention(grouped, kk, vv, attn_mask=torch.cat([bias.expand(r, kvh, -1, -1), means], 3))
    return out.view(r, heads, nq, d).transpose(1, 2)


def _decode(spec: SparseSpec, pool: KVPool, layer: int, qr: torch.Tensor, rows: SparseRows,
            apart: HeadsApart) -> torch.Tensor:
    """`attend` for rows of one query each, planned in C (`sparse_decode`: the same blocks, slots
    and mask as `select` and `_reads`, and attention over `rest`'s group means) and read by the
    paged kernel, which folds the means' attention into its own."""
    r, heads, _, d = qr.shape
    kvh, width = pool.kv_heads, rows.tables.shape[1]
    per_group, groups = _grouping(spec, width)
    slots, mask, unread = sparse_decode.plan(spec, pool, layer, qr[:, :, 0], rows.tables, rows.num_blocks,
                                            rows.positions[:, 0], groups, per_group)
    prior = None if unread is None else (unread[0].view(r * kvh, 1, heads // kvh, d), unread[1].view(r * kvh, 1, -1))
    out, _ = paged_decode.attend(apart, layer, qr.reshape(r * kvh, 1, heads // kvh, d), slots, mask, prior)
    return out.view(r, 1, heads, d)


def _grouping(spec: SparseSpec, width: int) -> tuple[int, int]:
    """-> blocks per group of unread blocks and groups per row (0, 0: none) for tables `width`
    blocks wide."""
    if spec.rest_group == 0 or width <= spec.blocks:  # every block read: none left over
        return 0, 0
    g = max(spec.rest_group, -(-width // MAX_GROUPS))
    return g, -(-width // g)


def _reads(rows: SparseRows, chosen: torch.Tensor, bs: int) -> tuple[torch.Tensor, ...]:
    """The keys each (row, kv head) reads, as rows of `HeadsApart` (row-major, kv head minor):
    chosen [R, KVH, S] (sorted, as `select` returns it) -> slots [R * KVH, K] (`slot * KVH +
    head`), K = S * bs; and, the same for every kv head of a row, written [R, K] (the key is in
    the row's context) and mask [R, Q, K] (and visible to the query). One mask serves the heads
    because their sorted choices differ only in top-k blocks, which lie wholly before the row's
    queries: the sinks and local blocks take the same columns in every head."""
    r, kvh, s = chosen.shape
    block = rows.tables.gather(1, chosen.clamp(min=0).view(r, -1)).view(r, kvh, s)  # pool block ids
    offsets = torch.arange(bs, device=chosen.device)
    head = torch.arange(kvh, device=chosen.device)[None, :, None]
    slots = ((block[..., None] * bs + offsets).view(r, kvh, s * bs) * kvh + head).view(r * kvh, s * bs)
    key_pos = (chosen[:, 0, :, None] * bs + offsets).view(r, s * bs)  # kv head 0's: the columns' visibility
    readable = (chosen[:, 0] >= 0)[..., None].expand(r, s, bs).reshape(r, s * bs)
    # slots past the row's last query are never written yet (or hold another sequence's keys, or
    # the pool's uninitialised memory): zeroed, as a NaN there would reach the output through 0 x NaN
    written = readable & (key_pos <= rows.positions.max(1).values[:, None])
    mask = written[:, None, :] & (key_pos[:, None, :] <= rows.positions[:, :, None])
    mask[:, :, 0] |= rows.positions < 0  # a padding query sees one key (its output is dropped)
    return slots, written, mask


@dataclass
class Rest:
    """Each row's unread blocks, per kv head and group of `SparseSpec.rest_group` blocks, as one key."""
    keys: torch.Tensor  # [R, KVH, G, D] the unread keys' mean (float32)
    values: torch.Tensor  # [R, KVH, G, D] the unread values' mean
    bias: torch.Tensor  # [R, KVH, G] log of how many keys the mean stands for; -inf where none


def rest(spec: SparseSpec, pool: KVPool, layer: int, rows: SparseRows, chosen: torch.Tensor,
         shared: bool | None = None) -> Rest | None:
    """The blocks of each row's context not in `chosen` [R, KVH, S] (per kv head), grouped; None
    when there are none to group (`rest_group` 0, or every row reads all its blocks). Unread
    blocks lie before all of the row's queries (they are neither its local blocks nor past
    them), so each is whole and visible to every query of the row. Groups grow past `rest_group`
    blocks where a context would have more than MAX_GROUPS of them: a row's cost stays bounded at
    any length. A group's sums over all its blocks are made once for all kv heads; each head's
    own chosen blocks are then taken out of its copy."""
    r, kvh, s = chosen.shape
    width = rows.tables.shape[1]
    g, groups = _grouping(spec, width)
    if not groups:
        return None
    dev = chosen.device
    # each row's groups end at its own last block: [R, groups + 1] block edges
    edges = (torch.arange(groups + 1, device=dev) * g)[None].clamp(max=rows.num_blocks[:, None])
    count = (edges[:, 1:] - edges[:, :-1]).float()[:, None].repeat(1, kvh, 1)  # [R, KVH, groups] blocks
    read, at = chosen >= 0, chosen.clamp(min=0)
    count.scatter_add_(2, at // g, -read.float())  # the chosen blocks are read exactly: not in their group
    shared = _shared(rows) if shared is None else shared
    if not shared:  # each row's blocks, up to its last, in one list; a bag per group (embedding_bag
        # sums them where they lie: gathering them first took 14 of 15 ms at 16k blocks)
        valid = torch.arange(width, device=dev)[None] < rows.num_blocks[:, None]
        listed = rows.tables[valid]
        bags = ((rows.num_blocks.cumsum(0) - rows.num_blocks)[:, None] + edges[:, :-1]).view(-1)
    blocks = rows.tables.gather(1, at.view(r, -1)).view(r, kvh, s)  # pool ids of the chosen blocks
    head = torch.arange(kvh, device=dev)[None, :, None]
    means = []
    for t in (pool.k_sum[layer], pool.v_sum[layer]):
        per_block = t.view(t.shape[0], -1)  # [pool blocks, KVH * D]
        if shared:  # a prefill chunk's rows: prefix sums over the one table (float64: a group is a difference)
            prefix = F.pad(per_block[rows.tables[0]].double().cumsum(0), (0, 0, 1, 0))
            sums = (prefix[edges[:, 1:]] - prefix[edges[:, :-1]]).float()  # [R, groups, KVH * D]
        else:  # an empty bag (a group past the row's blocks) sums to 0
            sums = F.embedding_bag(listed, per_block.float(), bags, mode="sum").view(r, groups, -1)
        sums = sums.view(r, groups, kvh, -1).transpose(1, 2).contiguous()  # [R, KVH, groups, D]
        picked = t[blocks, head].float() * read[..., None]  # [R, KVH, S, D]: each head's own chosen blocks
        sums.scatter_add_(2, (at // g)[..., None].expand_as(picked), -picked)
        means.append(sums.div_((count * pool.block_size).clamp(min=1)[..., None]))
    k, v = means
    return Rest(k, v, torch.where(count > 0, (count * pool.block_size).log(), -torch.inf))


def _attend_rest(qr: torch.Tensor, unread: Rest) -> tuple[torch.Tensor, torch.Tensor]:
    """qr [R, H, Q, D] over the group means -> the output [R, H, Q, D] (float32) and the
    log-sum-exp of the scaled, biased scores [R, H, Q] (-inf where a row has none)."""
    r, heads, nq, d = qr.shape
    kvh = unread.keys.shape[1]
    scores = qr.float().reshape(r, kvh, heads // kvh * nq, d) @ unread.keys.transpose(2, 3) * d ** -0.5
    scores += unread.bias[:, :, None, :]
    lse = scores.logsumexp(-1)
    weights = (scores - torch.where(torch.isfinite(lse), lse, 0)[..., None]).exp_()  # all 0 where none
    return (weights @ unread.values).view(r, heads, nq, d), lse.view(r, heads, nq)


def _block_scores(hi: torch.Tensor, lo: torch.Tensor, top: torch.Tensor, bottom: torch.Tensor,
                  tables: torch.Tensor) -> torch.Tensor:
    """Quest's bound top . hi + bottom . lo per kv head of the blocks in each row's table: hi, lo
    [pool blocks, KVH, D], top, bottom [R, KVH, D], tables [R, W] -> [R, KVH, W]. Where the tables
    list a third of the pool's blocks or more, every pool block is scored once for all rows (one
    matrix product per kv head that reads the summaries where they lie); else the rows' blocks are
    copied out first (index_select, 3x faster than indexing with the [R, W] tables, and a copy
    costs about three reads). A block no table lists may score NaN (an unwritten block's infinite
    bounds): never gathered, or masked by the caller (a table's padding)."""
    r, width = tables.shape
    kvh = hi.shape[1]
    if 3 * tables.numel() >= hi.shape[0]:
        every = hi.float().transpose(0, 1) @ top.permute(1, 2, 0) + lo.float().transpose(0, 1) @ bottom.permute(1, 2, 0)
        return every.permute(2, 0, 1).gather(2, tables[:, None, :].expand(r, kvh, width))  # from [KVH, blocks, R]
    flat = tables.reshape(-1)
    hi, lo = (t.index_select(0, flat).float().view(r, width, kvh, -1).transpose(1, 2) for t in (hi, lo))
    return (hi @ top[..., None] + lo @ bottom[..., None]).squeeze(3)


def _shared(rows: SparseRows) -> bool:
    """Whether all rows (more than one) read one table: the query blocks of one prefill chunk."""
    return rows.tables.shape[0] > 1 and bool((rows.tables == rows.tables[0]).all())
