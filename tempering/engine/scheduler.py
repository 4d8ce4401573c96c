"""`Scheduler`: which sequences run in the next engine step, and how many tokens each.

Continuous batching under a token budget: running sequences go first, oldest first (a decode
costs one token, a prompt being prefilled takes the chunk the budget allows), then waiting
sequences are admitted in arrival order while the budget, the batch size and the free blocks
allow. An admitted sequence first takes what the prefix cache holds of it. When a running
sequence needs a block and none is free, the newest running sequences are preempted by
recompute: their blocks are released (full ones stay cached, so recomputing often hits) and they
go back to the front of the queue with all their tokens. It does not run the model or sample.
"""

from __future__ import annotations

from collections import deque

from tempering.engine.block_manager import BlockManager
from tempering.engine.sequence import Sequence, Status


class Scheduler:
    def __init__(self, blocks: BlockManager, max_batch_size: int, max_batched_tokens: int):
        self.blocks = blocks
        self.max_batch_size, self.max_batched_tokens = max_batch_size, max_batched_tokens
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.preemptions = 0

    def add(self, seq: Sequence, front: bool = False) -> None:
        seq.status = Status.WAITING
        (self.waiting.appendleft if front else self.waiting.append)(seq)

    @property
    def batch_full(self) -> bool:
        return len(self.running) >= self.max_batch_size

    def admit(self, seq: Sequence) -> None:
        """Put `seq`, whose blocks are in place, into the running batch."""
        seq.status = Status.RUNNING
        self.running.append(seq)

    def remove(self, seq: Sequence) -> None:
        """Take `seq` out of the queues (abort); the caller releases its blocks."""
        if seq in self.waiting:
            self.waiting.remove(seq)

    def schedule(self, version: int) -> list[tuple[Sequence, int]]:
        """-> (sequence, tokens to compute) with decode items (1 token) first."""
        self.running = [s for s in self.running if s.status is Status.RUNNING]
        budget = self.max_batched_tokens
        items: list[tuple[Sequence, int]] = []
        i = 0
        while i < len(self.running) and budget > 0:
            seq = self.running[i]
            count = min(seq.pending, budget)
            if not self._make_room(seq, seq.num_computed + count):
                break  # seq itself was preempted; everything after it already was
            items.append((seq, count))
            budget -= count
            i += 1
        while self.waiting and budget > 0 and not self.batch_full:
            seq = self.waiting[0]  # waiting sequences hold no blocks: they start from the prefix cache
            self.blocks.match_prefix(seq, version)
            count = min(seq.pending, budget)
            if not self.blocks.ensure(seq, seq.num_computed + count):
                self._undo(seq)
                break
            self.admit(self.waiting.popleft())
            items.append((seq, count))
            budget -= count
        # Decode items first, longest context first (the runner pads contexts in buckets of
        # similar length), prefill chunks after them in scheduling order.
        items.sort(key=lambda item: (item[1] != 1, -item[0].num_computed if item[1] == 1 else 0))
        return items

    def preempt_all(self) -> None:
        """Send every running sequence back to the queue to be recomputed (new weights)."""
        for seq in reversed(self.running):
            if seq.status is Status.RUNNING:
                self._preempt(seq)
        self.running = []

    def _make_room(self, seq: Sequence, upto: int) -> bool:
        while not self.blocks.ensure(seq, upto):
            victim = self.running.pop()
            self._preempt(victim)
            if victim is seq:
                return False
        return True

    def _preempt(self, seq: Sequence) -> None:
        self._undo(seq)
        self.add(seq, front=True)
        self.preemptions += 1

    def _undo(self, seq: Sequence) -> None:
        self.blocks.release(seq)
        seq.num_computed = 0
