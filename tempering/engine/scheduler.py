"""`Scheduler`: which sequences run in the next engine step, how many tokens each, and which of
them sample a token.

Continuous batching under a token budget: running sequences first (a decode costs one token, a
prefill the chunk the budget allows), then waiting ones in arrival order while budget, batch size
and free blocks allow, each first taking what the prefix cache holds of it. Out of blocks, the
newest running sequences are preempted: by swap (`engine.swap_blocks`; they resume first, with
nothing recomputed) when their blocks are all their own, else by recompute. A request's n samples
fork from its first once the shared prompt is computed (`SchedulerOutput.copies`: the partial last
block). `hold` admits nothing new while a weight load waits for the requests in flight. It neither
runs the model nor samples, and does not decide when a sequence is finished: `finish` is told."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from tempering.engine.block_manager import BlockManager
from tempering.engine.kv_swap import SwapSpace
from tempering.engine.sequence import Sequence, Status


@dataclass
class SchedulerOutput:
    # (sequence, tokens to compute): decode items (1 token) first, then prefill chunks
    items: list[tuple[Sequence, int]] = field(default_factory=list)
    # (sequence, item whose last logits it samples from): items that reach the end of their
    # tokens, each followed by the forks that start from it
    sampled: list[tuple[Sequence, int]] = field(default_factory=list)
    # (source block, destination block, slots): KV to copy after the forward, before sampling
    copies: list[tuple[int, int, int]] = field(default_factory=list)


class Scheduler:
    def __init__(self, blocks: BlockManager, max_batch_size: int, max_batched_tokens: int,
                 swap: SwapSpace | None = None):
        self.blocks, self.swap = blocks, swap  # swap None: preempt by recompute only
        self.max_batch_size, self.max_batched_tokens = max_batch_size, max_batched_tokens
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.swapped: deque[Sequence] = deque()  # preempted with their KV in `swap`, next to resume first
        self.forks: dict[Sequence, list[Sequence]] = {}  # a request's first sample -> the others
        self.preemptions = 0  # by recompute
        self.swaps_out = self.swaps_in = 0  # preemptions by swap, and resumptions from it
        self.hold = False  # admit only sequences in flight (a weight load waits for them)
        # admitted once, with their forks, and not finished: what a hold lets finish
        self.started: set[Sequence] = set()

    def add(self, seq: Sequence, front: bool = False, forks: list[Sequence] = ()) -> None:
        """Queue `seq`; `forks` (its siblings) wait until it has computed their shared prompt."""
        seq.status = Status.WAITING
        (self.waiting.appendleft if front else self.waiting.append)(seq)
        if forks:
            self.forks[seq] = list(forks)
            for f in forks:
                f.status = Status.FORK_PENDING

    @property
    def batch_full(self) -> bool:
        return len(self.running) >= self.max_batch_size

    @property
    def in_flight(self) -> int:
        """Sequences started and not finished (running, preempted, or forks waiting for a place)."""
        return len(self.started)

    def admit(self, seq: Sequence) -> None:
        """Put `seq`, whose blocks are in place, into the running batch."""
        seq.status = Status.RUNNING
        self.running.append(seq)
        self.started.add(seq)
        self.started.update(self.forks.get(seq, ()))  # its request has started: its forks belong to it

    def finish(self, seq: Sequence) -> None:
        """`seq` is done (finished or aborted): out of the queues, its blocks released, its
        pending forks (abort) dropped."""
        if seq.status is Status.WAITING:
            self.waiting.remove(seq)
        elif seq.status is Status.SWAPPED:
            self.swapped.remove(seq)
            self._drop_swap(seq)
        for child in self.forks.pop(seq, ()):
            self.started.discard(child)
        self.started.discard(seq)
        self.blocks.release(seq)
        seq.status = Status.FINISHED  # a running one leaves `running` at the next schedule

    def schedule(self, version: int) -> SchedulerOutput:
        """-> what runs in the next step (`version` salts the prefix-cache lookups)."""
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
        budget = self._swap_in(items, budget)
        # Swapped sequences come first: while one waits for blocks, nothing new takes them.
        while not self.swapped and budget > 0 and not self.batch_full:
            seq = self._next_waiting()
            if seq is None:
                break
            self.blocks.match_prefix(seq, version)  # waiting sequences hold no blocks: they start from the prefix cache
            count = min(seq.pending, budget)
            if not self.blocks.ensure(seq, seq.num_computed + count):
                self._undo(seq)
                break
            self.waiting.remove(seq)  # the head, unless a hold skipped sequences that have not started
            self.admit(seq)
            items.append((seq, count))
            budget -= count
        # Decode items first, longest context first (the runner pads contexts in buckets of
        # similar length), prefill chunks after them in scheduling order.
        items.sort(key=lambda item: (item[1] != 1, -item[0].num_computed if item[1] == 1 else 0))
        out = SchedulerOutput(items)
        for k, (seq, count) in enumerate(items):
            if seq.num_computed + count == len(seq.tokens):  # its next token is sampled in this step
                out.sampled.append((seq, k))
                if seq in self.forks:
                    self._fork(seq, seq.num_computed + count, k, out)
        return out

    def _swap_in(self, items: list[tuple[Sequence, int]], budget: int) -> int:
        """Resume swapped sequences, in order, while they fit: fresh blocks, their KV copied back
        from the swap space. -> the token budget left."""
        while self.swapped and budget > 0 and not self.batch_full:
            seq = self.swapped[0]
            count = min(seq.pending, budget)
            if not self.blocks.ensure(seq, seq.num_computed + count):
                break
            self.swap.swap_in(seq.swap_table, seq.block_table[:len(seq.swap_table)])
            seq.swap_table = []
            self.swapped.popleft()
            self.admit(seq)
            items.append((seq, count))
            budget -= count
            self.swaps_in += 1
        return budget

    def _next_waiting(self) -> Sequence | None:
        """The sequence to admit next: the queue's head, or under a hold the first in flight."""
        if not self.hold:
            return self.waiting[0] if self.waiting else None
        return next((s for s in self.waiting if s in self.started), None)

    def _fork(self, parent: Sequence, upto: int, k: int, out: SchedulerOutput) -> None:
        # After the admission loop: a fork queued here must not be admitted before the prompt
        # it would find in the prefix cache is computed.
        for child in self.forks.pop(parent):
            copies = None if self.batch_full else self.blocks.fork(parent, child, upto)
            if copies is None:
                self.add(child)
                continue
            out.copies += copies
            self.admit(child)
            out.sampled.append((child, k))

    def update(self, out: SchedulerOutput, version: int) -> None:
        """After the model ran `out`: its tokens have KV now (prefix cache, sliding window)."""
        for seq, count in out.items:
            self.blocks.computed(seq, count, version)

    def preempt_all(self) -> None:
        """Send every running and swapped sequence back to the queue to be recomputed (new
        weights: no KV computed under the old ones may be used again, swapped KV included)."""
        for seq in reversed(self.running):
            if seq.status is Status.RUNNING:
                self._recompute(seq)
        self.running = []
        while self.swapped:  # to the very front, in their order: they had priority
            seq = self.swapped.pop()
            self._drop_swap(seq)
            self._recompute(seq)

    def _make_room(self, seq: Sequence, upto: int) -> bool:
        while not self.blocks.ensure(seq, upto):
            victim = self.running.pop()
            self._preempt(victim)
            if victim is seq:
                return False
        return True

    def _preempt(self, seq: Sequence) -> None:
        if not self._swap_out(seq):
            self._recompute(seq)

    def _recompute(self, seq: Sequence) -> None:
        self._undo(seq)
        self.add(seq, front=True)
        self.preemptions += 1

    def _swap_out(self, seq: Sequence) -> bool:
        """Preempt `seq` by swapping its computed blocks out. -> False (nothing done) without
        room in the swap space, or when a block is shared (a fork's or another sequence's prefix
        hit: its KV must stay in the pool for them, and freeing it frees nothing), or under a
        sliding window (its table has holes where the window dropped blocks, which a swap-in
        would have to recreate, and the sinks' blocks; not built: such sequences are recomputed)."""
        if self.swap is None or self.blocks.window:
            return False
        kept = seq.block_table[: self.blocks.blocks_for(seq.num_computed)]
        if not kept or len(kept) > self.swap.num_free or not self.blocks.exclusive(seq.block_table):
            return False
        seq.swap_table = self.swap.swap_out(kept)
        self.blocks.release(seq)  # full blocks stay in the prefix cache; swap-in registers its own
        seq.status = Status.SWAPPED
        self.swapped.appendleft(seq)  # victims go newest first: the oldest ends at the front
        self.swaps_out += 1
        return True

    def _drop_swap(self, seq: Sequence) -> None:
        self.swap.release(seq.swap_table)
        seq.swap_table = []

    def _undo(self, seq: Sequence) -> None:
        self.blocks.release(seq)
        seq.num_computed = 0
