"""`ModelRunner`: turns a scheduled step into tensors, runs the decoder once, makes the KV
copies the scheduler asked for, and samples.

The step's items are (sequence, token count): decode items (count 1) and prefill chunks. All their
tokens go through the model as one flat row, so the projections and MLPs see one large matrix
instead of a padded batch. Index tensors (write slots, gathered context slots, masks) are built
here once per step and reused by every layer. Logits are computed only for the items whose next
token is sampled, once per item even when forks sample from it too. It does not decide what runs
or when a sequence is finished.
"""

from __future__ import annotations

import itertools

import numpy as np
import torch

from tempering.engine.attention import (DecodeBucket, PagedAttention, PrefillChunk, SharedPrefix, StepMeta,
                                         flex_block_mask, visible)
from tempering.engine.kv_cache import KVPool
from tempering.engine.plan import AttentionPlan
from tempering.engine.sampler import sample
from tempering.engine.sparse import SparseRows, SparseSpec
from tempering.engine.scheduler import SchedulerOutput
from tempering.engine.sequence import Sequence
from tempering.models import Decoder


MIN_SHARED_TOKENS = 64  # shorter shared prefixes are cheaper to read per sequence
BUCKET_FILL = 0.75  # a decode bucket takes rows while their context is >= this x its longest
MIN_BUCKET_ROWS = 8  # below this a separate attention call costs more than the padding it saves


class ModelRunner:
    def __init__(self, model: Decoder, pool: KVPool, plan: AttentionPlan, window: int = 0, sinks: int = 0,
                 sparse: SparseSpec | None = None, sparse_layers: frozenset[int] = frozenset()):
        self.model, self.pool, self.plan = model, pool, plan
        self.sparse, self.sparse_layers = sparse, sparse_layers
        self.device = pool.device  # every index tensor is made there: the engine runs where the model is
        self.bs = pool.block_size
        self.window, self.sinks = window, sinks
        self.flex = plan.prefill != "sdpa"
        self.compile_flex = plan.prefill == "compiled flex"
        self.shared_prefix_reads = 0  # decode rows that read a shared prefix once for their group

    @torch.no_grad()
    def run(self, step: SchedulerOutput) -> tuple[list[int], list[float]]:
        """-> the token sampled for each of `step.sampled` and its logprob."""
        items = step.items
        ids: list[int] = []
        positions: list[int] = []
        for seq, count in items:
            ids.extend(seq.tokens[seq.num_computed: seq.num_computed + count])
            positions.extend(range(seq.num_computed, seq.num_computed + count))
        num_decode = 0
        while num_decode < len(items) and items[num_decode][1] == 1:
            num_decode += 1
        meta = StepMeta(write_slots=self._write_slots(items, num_decode), num_decode=num_decode)
        dense = self.sparse is None or len(self.sparse_layers) < len(self.model.model.layers)
        if num_decode:
            decoding = [s for s, _ in items[:num_decode]]
            if dense:
                self._decode_meta(meta, decoding)
            if self.sparse is not None:
                meta.sparse_decode = self._sparse_rows([(s, s.num_computed, 1, i) for i, s in enumerate(decoding)])
        offset = num_decode
        for seq, count in items[num_decode:]:
            chunk = self._prefill_chunk(seq, offset, count) if dense or seq.num_computed == 0 else PrefillChunk(
                offset, count)
            if self.sparse is not None and seq.num_computed > 0:  # a first chunk reads only itself: dense
                chunk.sparse = self._sparse_rows(self._query_blocks(seq, offset, count))
            meta.prefills.append(chunk)
            offset += count
        attention = PagedAttention(self.pool, meta, self.plan, self.sparse, self.sparse_layers)
        hidden = self.model.hidden_states(self._t([ids]), self._t([positions]), attention)
        for src, dst, slots in step.copies:  # a fork's partial block: this forward has just written it
            self.pool.copy_block(src, dst, slots)
        if not step.sampled:
            return [], []
        ends = list(itertools.accumulate(count for _, count in items))
        row_of: dict[int, int] = {}  # item -> its row of logits
        for _, k in step.sampled:
            row_of.setdefault(k, len(row_of))
        logits = self.model.lm_head(hidden[0, [ends[k] - 1 for k in row_of]]).float()
        rows = [row_of[k] for _, k in step.sampled]
        if rows != list(range(len(rows))):
            logits = logits.index_select(0, self._t(rows))
        seqs = [s for s, _ in step.sampled]
        ps = [s.params for s in seqs]
        tokens, logprobs = sample(logits, self._t([p.temperature for p in ps]),
                                  self._t([p.top_p for p in ps]), self._t([p.top_k for p in ps]),
                                  [s.generator for s in seqs], native=self.plan.native_sampler)
        return tokens.tolist(), logprobs.tolist()

    def _query_blocks(self, seq: Sequence, offset: int, count: int) -> list[tuple[Sequence, int, int, int]]:
        """A prefill chunk's queries cut at block boundaries: (seq, first position, count, token offset)."""
        out, pos, end = [], seq.num_computed, seq.num_computed + count
        while pos < end:
            stop = min(end, (pos // self.bs + 1) * self.bs)
            out.append((seq, pos, stop - pos, offset + pos - seq.num_computed))
            pos = stop
        return out

    def _sparse_rows(self, rows: list[tuple[Sequence, int, int, int]]) -> SparseRows:
        """Query rows (seq, first position, count, first token) -> their `SparseRows`."""
        width = max(len(seq.block_table) for seq, *_ in rows)
        q = max(count for _, _, count, _ in rows)
        tokens = [[t + i if i < count else -1 for i in range(q)] for _, _, count, t in rows]
        positions = [[p + i if i < count else -1 for i in range(q)] for _, p, count, _ in rows]
        tables = [seq.block_table + [0] * (width - len(seq.block_table)) for seq, *_ in rows]
        blocks = [(p + count - 1) // self.bs + 1 for _, p, count, _ in rows]
        return SparseRows(self._t(tokens), self._t(positions), self._t(tables, dtype=torch.long), self._t(blocks))

    def _t(self, data, dtype: torch.dtype | None = None) -> torch.Tensor:
        """`data` (a list, or a list of equal-length lists) as a tensor on the runner's device, as
        `torch.tensor` makes it (floats in the default dtype), through numpy: 4-5x faster from
        Python lists (the step's token ids and positions, block tables, sampling parameters)."""
        t = torch.from_numpy(np.asarray(data))
        if dtype is None:  # numpy's default ints are 32-bit on some platforms; torch's are 64
            dtype = torch.get_default_dtype() if t.is_floating_point() else torch.bool if t.dtype == torch.bool \
                else torch.int64
        return t.to(self.device, dtype)

    def _write_slots(self, items: list[tuple[Sequence, int]], num_decode: int) -> torch.Tensor:
        bs, slots = self.bs, []
        for seq, _ in items[:num_decode]:
            p = seq.num_computed
            slots.append(seq.block_table[p // bs] * bs + p % bs)
        head = self._t(slots, dtype=torch.long)
        parts = [head]
        for seq, count in items[num_decode:]:
            pos = torch.arange(seq.num_computed, seq.num_computed + count, device=self.device)
            table = self._t(seq.block_table, dtype=torch.long)
            parts.append(table[pos // bs] * bs + pos % bs)
        return torch.cat(parts) if len(parts) > 1 else head

    def _key_positions(self, lengths: torch.Tensor, width: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Positions each decode query reads: all of [0, length) or, with a window, the sinks and
        the last `window` tokens. -> positions [B, width], valid [B, width]."""
        j = torch.arange(width, device=self.device)[None, :]
        pos = j.expand(len(lengths), width)
        if self.window:
            span = self.sinks + self.window
            slid = torch.where(j < self.sinks, j, lengths[:, None] - span + j)
            pos = torch.where(lengths[:, None] > span, slid, pos)
        return pos, pos < lengths[:, None]

    def _slots(self, table: torch.Tensor, pos: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        """Block tables [B, blocks] and positions [B, K] -> pool slots (0 where not valid)."""
        block = torch.gather(table, 1, (pos // self.bs).clamp(0, table.shape[1] - 1))
        slots = block * self.bs + pos % self.bs
        return torch.where(valid & (block >= 0), slots, 0)

    def _decode_meta(self, meta: StepMeta, seqs: list[Sequence]) -> None:
        lengths = self._t([s.num_computed + 1 for s in seqs])
        widest = max(len(s.block_table) for s in seqs)
        table = self._t([s.block_table + [0] * (widest - len(s.block_table)) for s in seqs])
        starts = torch.zeros(len(seqs), dtype=torch.long, device=self.device)
        if self.plan.cascade:
            for rows, blocks in self._shared_prefixes(seqs):
                meta.shared.append(SharedPrefix(self._t(rows), table[rows[0], :blocks].repeat_interleave(
                    self.bs) * self.bs + torch.arange(self.bs, device=self.device).repeat(blocks)))
                starts[rows] = blocks * self.bs
                self.shared_prefix_reads += len(rows)
        own = lengths - starts
        # The paged kernel skips a padded slot for one mask read, less than a call per bucket costs
        ranges = [(0, len(seqs))] if self.plan.paged_decode else _buckets(own.tolist())
        for lo, hi in ranges:
            width = int(own[lo:hi].max())
            if self.window:
                width = min(width, self.sinks + self.window)
            pos, valid = self._key_positions(own[lo:hi], width)
            index = self._slots(table[lo:hi], pos + starts[lo:hi, None], valid).reshape(-1)
            bucket = DecodeBucket(lo, hi, width, index, valid[:, None, None, :])
            if meta.shared:
                bucket.bias = torch.zeros(valid.shape, dtype=self.pool.dtype, device=self.device).masked_fill_(~valid, float("-inf"))[:, None, None, :]
            meta.decode.append(bucket)

    def _shared_prefixes(self, seqs: list[Sequence]) -> list[tuple[list[int], int]]:
        """Groups of decode rows whose block tables start with the same blocks (shared blocks are
        always full), with the number of blocks they share."""
        by_first: dict[int, list[int]] = {}
        for i, s in enumerate(seqs):
            if len(s.block_table) * self.bs > MIN_SHARED_TOKENS:
                by_first.setdefault(s.block_table[0], []).append(i)
        groups = []
        for rows in by_first.values():
            if len(rows) < 2:
                continue
            first = seqs[rows[0]].block_table
            n = min(len(seqs[i].block_table) for i in rows) - 1  # a row's last block is its own
            for i in rows[1:]:
                other = seqs[i].block_table
                while n and other[:n] != first[:n]:
                    n = _common_prefix(first, other, n)
            if n * self.bs >= MIN_SHARED_TOKENS:
                groups.append((rows, n))
        return groups

    def _prefill_chunk(self, seq: Sequence, start: int, count: int) -> PrefillChunk:
        first = seq.num_computed
        if first == 0 and not self.window:
            return PrefillChunk(start, count)
        end = first + count
        if self.window:
            lo = max(self.sinks, first - self.window + 1)
            # a first chunk shorter than the sinks reads only itself (it lies within them)
            k_pos = torch.cat([torch.arange(min(self.sinks, lo, end), device=self.device),
                               torch.arange(lo, max(lo, end), device=self.device)])
        else:
            k_pos = torch.arange(end, device=self.device)
        q_pos = torch.arange(first, end, device=self.device)
        table = self._t([seq.block_table], dtype=torch.long)
        index = self._slots(table, k_pos[None], torch.ones(1, len(k_pos), dtype=torch.bool, device=self.device))[0]
        chunk = PrefillChunk(start, count, index, visible(q_pos[:, None], k_pos[None, :], self.window, self.sinks))
        if self.flex:
            if self.compile_flex:  # compiled kernels are per shape: pad to few shapes
                q_pos, k_pos = _pad(q_pos, -1), _pad(k_pos, 1 << 40)  # padding sees / is seen by nothing
                chunk.index = torch.cat([index, index.new_zeros(len(k_pos) - len(index))])
            chunk.block_mask = flex_block_mask(q_pos, k_pos, self.window, self.sinks)
        return chunk


def _common_prefix(a: list[int], b: list[int], limit: int) -> int:
    """Length of the longest common prefix of a[:limit] and b[:limit] (binary search on slices,
    which compare at C speed)."""
    lo, hi = 0, limit
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _buckets(lengths: list[int]) -> list[tuple[int, int]]:
    """Split rows (sorted by context length, longest first) into ranges padded together: a range
    takes rows while they fill BUCKET_FILL of its longest context, and has MIN_BUCKET_ROWS rows
    at least. -> [(lo, hi)]"""
    out, lo = [], 0
    while lo < len(lengths):
        hi = min(lo + MIN_BUCKET_ROWS, len(lengths))
        while hi < len(lengths) and lengths[hi] >= BUCKET_FILL * lengths[lo]:
            hi += 1
        out.append((lo, hi))
        lo = hi
    return out


def _pad(x: torch.Tensor, value: int, multiple: int = 128) -> torch.Tensor:
    return torch.cat([x, x.new_full((-len(x) % multiple,), value)])
