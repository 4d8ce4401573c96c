"""`BlockManager`: paged KV accounting (fixed-size blocks, reference counts, block tables) and
the prefix cache.

A block holds `block_size` consecutive token positions of one or more sequences. A full block
whose KV is computed is registered under a hash chained over every earlier block of its sequence
and salted with the policy version that computed it, so a lookup under another version never
matches. Blocks nobody references stay cached (their KV intact) in LRU order and are evicted only
when a fresh block is needed. Only full blocks are ever shared, so a sequence writes only into
blocks it owns alone. With a sliding window, blocks no future query can see are freed as the
sequence advances (`computed`). This module moves no tensors: a fork hands back the KV copy it
needs, which the model runner performs.
"""

from __future__ import annotations

import hashlib
from array import array
from collections import OrderedDict

from tempering.engine.sequence import DROPPED, Sequence


class BlockManager:
    def __init__(self, num_blocks: int, block_size: int, prefix_cache: bool = True, window: int = 0, sinks: int = 0):
        if num_blocks < 1 or block_size < 1:
            raise ValueError(f"BlockManager: need num_blocks >= 1 and block_size >= 1, got {num_blocks}, {block_size}")
        self.num_blocks, self.block_size, self.prefix_cache = num_blocks, block_size, prefix_cache
        self.window, self.sinks = window, sinks  # window 0: every block stays visible
        self.ref = [0] * num_blocks
        self.hash_of: list[bytes | None] = [None] * num_blocks
        # A stack: the most recently freed block is reused first, so the pool's touched memory
        # stays at the peak working set instead of cycling through every page.
        self.free: list[int] = list(range(num_blocks - 1, -1, -1))
        self.cached: dict[bytes, int] = {}  # hash -> block holding that KV
        self.evictable: OrderedDict[int, None] = OrderedDict()  # ref 0 and cached, oldest first
        self.stats = {"query_tokens": 0, "hit_tokens": 0, "evictions": 0}

    # -- capacity ---------------------------------------------------------------------------
    @property
    def num_available(self) -> int:
        return len(self.free) + len(self.evictable)

    @property
    def num_used(self) -> int:
        return self.num_blocks - self.num_available

    def _take(self) -> int:
        if self.free:
            block = self.free.pop()
        else:
            block, _ = self.evictable.popitem(last=False)  # least recently used
            del self.cached[self.hash_of[block]]
            self.hash_of[block] = None
            self.stats["evictions"] += 1
        assert self.ref[block] == 0
        self.ref[block] = 1
        return block

    def _retain(self, block: int) -> None:
        if self.ref[block] == 0:
            self.evictable.pop(block)
        self.ref[block] += 1

    def _drop(self, block: int) -> None:
        self.ref[block] -= 1
        assert self.ref[block] >= 0, f"block {block} released more often than taken"
        if self.ref[block] == 0:
            if self.hash_of[block] is not None:
                self.evictable[block] = None  # newest at the end
            else:
                self.free.append(block)

    # -- sequences --------------------------------------------------------------------------
    def blocks_for(self, tokens: int) -> int:
        """Blocks that hold `tokens` positions."""
        return -(-tokens // self.block_size)

    def blocks_needed(self, seq: Sequence, upto: int) -> int:
        """Fresh blocks `seq` needs so its table covers positions [0, upto)."""
        return max(0, self.blocks_for(upto) - len(seq.block_table))

    def ensure(self, seq: Sequence, upto: int) -> bool:
        """Extend the block table to cover positions [0, upto); all or nothing."""
        need = self.blocks_needed(seq, upto)
        if need > self.num_available:
            return False
        seq.block_table.extend(self._take() for _ in range(need))
        return True

    def release(self, seq: Sequence) -> None:
        for block in seq.block_table:
            if block != DROPPED:
                self._drop(block)
        seq.block_table = []
        seq.num_dropped = seq.num_registered = 0

    def exclusive(self, blocks: list[int]) -> bool:
        """Whether one sequence alone references each of `blocks` (none shared by a fork or
        another sequence's prefix-cache hit), so moving their KV elsewhere affects no one else."""
        return all(block != DROPPED and self.ref[block] == 1 for block in blocks)

    def match_prefix(self, seq: Sequence, version: int) -> int:
        """Take the cached blocks that start `seq` (always leaving one token to compute, whose
        logits are needed) and mark their tokens computed. -> tokens reused."""
        assert not seq.block_table and seq.num_computed == 0
        usable = (len(seq.tokens) - 1) // self.block_size
        self.stats["query_tokens"] += usable * self.block_size
        if not self.prefix_cache or usable == 0:
            return 0
        hashes = self.hashes(seq, version, usable)
        for h in hashes[:usable]:
            block = self.cached.get(h)
            if block is None:
                break
            self._retain(block)
            seq.block_table.append(block)
        hit = len(seq.block_table) * self.block_size
        seq.num_computed, seq.num_registered = hit, len(seq.block_table)
        self.stats["hit_tokens"] += hit
        return hit

    def computed(self, seq: Sequence, count: int, version: int) -> None:
        """`count` more tokens of `seq` have KV now: offer the blocks they filled to the prefix
        cache and free the blocks the window has left behind."""
        seq.num_computed += count
        self.commit(seq, version)
        if self.window:
            self.slide(seq, self.window, self.sinks)

    def commit(self, seq: Sequence, version: int) -> None:
        """Register the blocks `seq` has just filled with computed KV in the prefix cache."""
        if not self.prefix_cache:
            return
        full = seq.num_computed // self.block_size
        if full <= seq.num_registered:
            return
        hashes = self.hashes(seq, version, full)
        for i in range(seq.num_registered, full):
            block = seq.block_table[i]
            if block == DROPPED or self.hash_of[block] is not None:
                continue
            h = hashes[i]
            if h not in self.cached:  # an identical block computed elsewhere keeps its entry
                self.cached[h] = block
                self.hash_of[block] = h
        seq.num_registered = full

    def fork(self, parent: Sequence, child: Sequence, upto: int | None = None) -> list[tuple[int, int, int]] | None:
        """Start `child` where `parent` stands once its first `upto` tokens (default: those
        computed) have KV: the full blocks are shared by reference count, the partial last block
        gets a fresh block of the child's own. -> the KV copies that makes: [(source block,
        destination block, slots)], empty when there is no partial block; None when no block is
        free (the child then stays unforked)."""
        upto = parent.num_computed if upto is None else upto
        full, partial = divmod(upto, self.block_size)
        if partial and self.num_available == 0:
            return None
        for block in parent.block_table[:full]:
            if block != DROPPED:
                self._retain(block)
        child.block_table = list(parent.block_table[:full])
        child.num_dropped = parent.num_dropped
        child.block_hashes, child.hash_version = list(parent.block_hashes), parent.hash_version
        child.num_computed, child.num_registered = upto, full
        if not partial:
            return []
        block = self._take()
        child.block_table.append(block)
        return [(parent.block_table[full], block, partial)]

    def slide(self, seq: Sequence, window: int, sinks: int) -> None:
        """Free blocks no future query can see: older than the window, holding no sink."""
        bs = self.block_size
        first_kept = max(0, (seq.num_computed - window + 1) // bs)  # blocks before this are dead
        sink_blocks = -(-sinks // bs)
        for i in range(max(seq.num_dropped, sink_blocks), first_kept):
            if seq.block_table[i] != DROPPED:
                self._drop(seq.block_table[i])
                seq.block_table[i] = DROPPED
        seq.num_dropped = max(seq.num_dropped, first_kept)

    def hashes(self, seq: Sequence, version: int, count: int) -> list[bytes]:
        """Chained hashes of the first `count` full blocks of `seq` under `version`."""
        if seq.hash_version != version:
            seq.block_hashes, seq.hash_version = [], version
        bs, out = self.block_size, seq.block_hashes
        salt = version.to_bytes(8, "little", signed=True)
        while len(out) < count:
            i = len(out)
            h = hashlib.blake2b(out[-1] if out else salt, digest_size=16)
            h.update(salt)
            h.update(array("q", seq.tokens[i * bs: (i + 1) * bs]).tobytes())
            out.append(h.digest())
        return out

    def clear_cache(self) -> None:
        """Forget every cached block (a new policy version): unreferenced ones become free."""
        self.free.extend(self.evictable)
        self.evictable.clear()
        self.hash_of = [None] * self.num_blocks
        self.cached.clear()
