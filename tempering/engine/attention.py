"""`PagedAttention`: the attention callable the decoder runs with during an engine step.

One step is one flat row of tokens: the decode tokens (one per sequence), then chunks of
prefill. The step's metadata (`StepMeta`, built once by the model runner, shared by all layers)
says where each token's key and value are written and which pool slots each query reads. Per
layer: one write for the step; decode rows read by the CPU's C kernel straight from the pool
(`paged_decode`), or gathered and attended with SDPA (long int8 reads by `int8_attention`);
decode rows that share a long prefix read it once per group (cascade attention, merged by
log-sum-exp); one SDPA (or block-sparse `flex_attention`) per prefill chunk, a fresh sequence's
first chunk without reading the pool. Sparse layers read only the blocks `sparse` selects. It
does not decide what is in the step: that is the scheduler's job."""

from __future__ import annotations

import functools
import warnings
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from tempering.engine import int8_attention, sparse
from tempering.engine.cpu import paged_decode
from tempering.engine.kv_cache import KVPool
from tempering.engine.partial_attention import flash_with_lse, merge
from tempering.engine.plan import AttentionPlan
from tempering.engine.sparse import SparseRows, SparseSpec

if TYPE_CHECKING:  # imported where a block mask is made: flex_attention is slow to import
    from torch.nn.attention.flex_attention import BlockMask


@dataclass
class PrefillChunk:
    start: int  # offset of the chunk in the step's flat row
    length: int
    index: torch.Tensor | None = None  # pool slots of the keys it reads; None = its own keys, causal
    mask: torch.Tensor | None = None  # [length, keys] bool, True = may attend
    block_mask: BlockMask | None = None  # flex_attention's, for the same mask
    sparse: SparseRows | None = None  # its query blocks, in the engine's sparse layers


@dataclass
class SharedPrefix:
    rows: torch.Tensor  # decode rows (sequences) that share the prefix
    index: torch.Tensor  # [P] pool slots of the shared prefix's keys


@dataclass
class DecodeBucket:
    """Decode rows [lo, hi) of the step (contexts of similar length), padded to `keys` keys."""
    lo: int
    hi: int
    keys: int
    index: torch.Tensor  # [(hi - lo) * keys] pool slots
    mask: torch.Tensor  # [hi - lo, 1, 1, keys] bool
    bias: torch.Tensor | None = None  # the same as 0 / -inf, for the log-sum-exp kernel
    reader: paged_decode.Reader | None = None  # made by the step's first layer, used by all


@dataclass
class StepMeta:
    write_slots: torch.Tensor  # [N] pool slot of every token of the step
    num_decode: int = 0  # the first num_decode tokens are decode tokens
    decode: list[DecodeBucket] = field(default_factory=list)
    shared: list[SharedPrefix] = field(default_factory=list)  # then `decode` holds own keys only
    prefills: list[PrefillChunk] = field(default_factory=list)
    sparse_decode: SparseRows | None = None  # the decode rows, in the engine's sparse layers




@functools.lru_cache(maxsize=2)
def _flex(compiled: bool):
    from torch.nn.attention.flex_attention import flex_attention

    # Static shapes: inductor's CPU flex template fails to build with dynamic ones (torch 2.13).
    return torch.compile(flex_attention, dynamic=False) if compiled else flex_attention


def visible(q_pos: torch.Tensor, k_pos: torch.Tensor, window: int, sinks: int) -> torch.Tensor:
    """Whether a query at `q_pos` may attend to a key at `k_pos` (broadcast): causal, and
    (window > 0) only the last `window` keys plus the first `sinks`."""
    ok = k_pos <= q_pos
    return ok & ((k_pos < sinks) | (k_pos > q_pos - window)) if window > 0 else ok


def flex_block_mask(q_pos: torch.Tensor, k_pos: torch.Tensor, window: int, sinks: int, block: int = 16):
    """A BlockMask over positions with the `visible` mask. Blocks with no visible key are
    skipped entirely by flex_attention."""
    from torch.nn.attention.flex_attention import create_block_mask

    def mask_mod(b, h, qi, ki):
        return visible(q_pos[qi], k_pos[ki], window, sinks)

    return create_block_mask(mask_mod, None, None, len(q_pos), len(k_pos), device=q_pos.device, BLOCK_SIZE=block)


class PagedAttention:
    def __init__(self, pool: KVPool, meta: StepMeta, plan: AttentionPlan, sparse: SparseSpec | None = None,
                 sparse_layers: frozenset[int] = frozenset()):
        self.pool, self.meta, self.plan = pool, meta, plan
        self.sparse, self.sparse_layers = sparse, sparse_layers

    def __call__(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """q [1, H, N, D], k/v [1, KVH, N, D] -> [1, H, N, D]; writes k/v into the pool."""
        meta, pool = self.meta, self.pool
        pool.write(layer, meta.write_slots, k[0].transpose(0, 1), v[0].transpose(0, 1))
        out = torch.empty_like(q)
        gqa = q.shape[1] != k.shape[1]
        if self.sparse is not None and layer in self.sparse_layers:
            return self._sparse(layer, q, k, v, out, gqa)
        if meta.num_decode:
            rows = out[0, :, :meta.num_decode].transpose(0, 1)  # [B, H, D]: contiguous where q's layout is
            done = self._decode(layer, q[0, :, :meta.num_decode], rows if rows.is_contiguous() else None)
            if done is not rows:
                rows.copy_(done)
        for c in meta.prefills:
            span = slice(c.start, c.start + c.length)
            out[:, :, span] = self._prefill(layer, q[:, :, span], k[:, :, span], v[:, :, span], c, gqa)
        return out

    def _sparse(self, layer: int, q, k, v, out: torch.Tensor, gqa: bool) -> torch.Tensor:
        """Every query row block-sparse (`sparse`), but first chunks, which read only themselves."""
        assert self.sparse is not None
        rows = [self.meta.sparse_decode] + [c.sparse for c in self.meta.prefills]
        for r in rows:
            if r is not None:
                res = sparse.attend(self.sparse, self.pool, layer, q[0], r, self.plan)  # [R, Q, H, D]
                real = r.tokens >= 0
                out[0, :, r.tokens[real]] = res[real].transpose(0, 1)
        for c in self.meta.prefills:
            if c.sparse is None:
                span = slice(c.start, c.start + c.length)
                out[:, :, span] = F.scaled_dot_product_attention(q[:, :, span], k[:, :, span], v[:, :, span],
                                                                 is_causal=True, enable_gqa=gqa)
        return out

    def _decode(self, layer: int, q: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """q [H, B, D] (one query per decode row) -> [B, H, D], written into `out` when given
        (contiguous, q's dtype)."""
        heads, b, d = q.shape
        pool, kvh = self.pool, self.pool.kv_heads
        rep = heads // kvh
        qd = q.transpose(0, 1).unsqueeze(2)  # [B, H, 1, D]
        out = q.new_empty(b, heads, d) if out is None else out
        lse = q.new_empty(b, kvh, rep) if self.meta.shared else None
        for bk in self.meta.decode:
            rows = qd[bk.lo: bk.hi].reshape(-1, kvh, rep, d)
            if self.plan.paged_decode:
                if bk.reader is None:
                    bk.reader = paged_decode.Reader(pool, bk.index.view(bk.hi - bk.lo, bk.keys),
                                                    bk.mask.view(bk.hi - bk.lo, bk.keys))
                direct = out.dtype == torch.float32  # the kernel writes the rows' outputs in place
                o, l = bk.reader.read(layer, rows, out[bk.lo: bk.hi].view(rows.shape) if direct else None)
                if not direct:
                    out[bk.lo: bk.hi] = o.view(-1, heads, d)
                if lse is not None:
                    lse[bk.lo: bk.hi] = l
                continue
            if int8_attention.use(self.plan.int8_attention, bk.index.numel(), prefill=False):
                index, mask = bk.index.view(bk.hi - bk.lo, bk.keys), bk.mask.view(bk.hi - bk.lo, 1, bk.keys)
                if lse is None:
                    out[bk.lo: bk.hi] = int8_attention.attend(pool, layer, qd[bk.lo: bk.hi], index, mask)[:, :, 0]
                else:
                    o, l = int8_attention.attend(pool, layer, qd[bk.lo: bk.hi], index, mask, lse=True)
                    out[bk.lo: bk.hi] = o[:, :, 0]
                    lse[bk.lo: bk.hi] = l.view(-1, kvh, rep)
                continue
            kk, vv = pool.gather(layer, bk.index)
            kk = kk.view(bk.hi - bk.lo, bk.keys, kvh, d).transpose(1, 2)
            vv = vv.view(bk.hi - bk.lo, bk.keys, kvh, d).transpose(1, 2)
            # A kv head's query heads act as its query positions: one query row of `rep` per kv
            # head, instead of SDPA's GQA, which copies each kv head's keys and values `rep`
            # times on CPU (measured: 1.7x faster at 64 rows of 320 keys, 6 heads over 2).
            if lse is None:
                o = F.scaled_dot_product_attention(rows, kk, vv, attn_mask=bk.mask)
                out[bk.lo: bk.hi] = o.reshape(-1, heads, d)
            else:
                o, l = flash_with_lse(rows, kk, vv, attn_mask=bk.bias)
                out[bk.lo: bk.hi] = o.reshape(-1, heads, d)
                lse[bk.lo: bk.hi] = l
        if lse is not None:
            self._merge_shared(layer, qd.reshape(b, kvh, rep, d), out.view(b, kvh, rep, d), lse)
        return out

    def _merge_shared(self, layer: int, qr: torch.Tensor, o: torch.Tensor, lse: torch.Tensor) -> None:
        """Cascade: each group's queries against its shared prefix keys at once, merged into the
        rows' own-key results `o` [B, KVH, rep, D] by log-sum-exp (in place)."""
        _, kvh, rep, d = qr.shape
        for sp in self.meta.shared:
            g = len(sp.rows)
            qg = qr.index_select(0, sp.rows).transpose(0, 1).reshape(1, kvh, g * rep, d)
            if int8_attention.use(self.plan.int8_attention, sp.index.numel(), prefill=False):
                o1, l1 = int8_attention.attend(self.pool, layer, qg, sp.index[None], lse=True)
            else:
                kp, vp = self.pool.gather(layer, sp.index, buffer=1)
                o1, l1 = flash_with_lse(qg, kp.transpose(0, 1).unsqueeze(0), vp.transpose(0, 1).unsqueeze(0))
            o1 = o1.view(kvh, g, rep, d).transpose(0, 1)
            l1 = l1.view(kvh, g, rep).transpose(0, 1)
            o.index_copy_(0, sp.rows, merge(o.index_select(0, sp.rows), lse.index_select(0, sp.rows), o1, l1))

    def _prefill(self, layer, q, k, v, c: PrefillChunk, gqa: bool) -> torch.Tensor:
        if c.index is None:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
        if c.block_mask is None and int8_attention.use(self.plan.int8_attention, c.index.numel(), prefill=True):
            return int8_attention.attend(self.pool, layer, q, c.index[None], None if c.mask is None else c.mask[None])
        kk, vv = self.pool.gather(layer, c.index)
        kk = kk.transpose(0, 1).unsqueeze(0)  # [1, KVH, keys, D]
        vv = vv.transpose(0, 1).unsqueeze(0)
        if c.block_mask is not None:
            rows = q.shape[2]
            padded = c.block_mask.shape[-2]
            if padded > rows:  # compiled flex runs on shapes padded to a few sizes
                q = torch.cat([q, q.new_zeros(*q.shape[:2], padded - rows, q.shape[3])], dim=2)
            flex = _flex(self.plan.prefill == "compiled flex")
            with warnings.catch_warnings():  # eager flex is a deliberate choice (no compile wait)
                warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
                return flex(q, kk, vv, block_mask=c.block_mask, enable_gqa=gqa)[:, :, :rows]
        return F.scaled_dot_product_attention(q, kk, vv, attn_mask=c.mask, enable_gqa=gqa)
