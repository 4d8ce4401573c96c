"""`Admission`: which rollout batch may start, and when a batch is complete.

Batch b starts once version b - max_staleness is published (the staleness bound), and no new
batch starts while `queue_size` complete batches wait for the trainer (backpressure). A batch
is complete when each of its `groups_per_batch` places holds a finished group. DAPO's dynamic
sampling: a group whose rewards do not vary teaches nothing, so up to `refills` places per
batch are given to a re-drawn group instead (`ended` says so). It counts places only: which
domain a group comes from is `mix`'s choice, where it runs `placement`'s.
"""

from __future__ import annotations

from collections import Counter
from typing import Sequence


class Admission:
    def __init__(self, groups_per_batch: int, max_staleness: int, queue_size: int, first_batch: int = 0,
                 last_batch: int | None = None, refills: int = 0):
        self.groups_per_batch, self.max_staleness, self.queue_size = groups_per_batch, max_staleness, queue_size
        self.next_batch, self.last_batch, self.refills = first_batch, last_batch, refills
        self._done: Counter = Counter()  # batch -> groups finished
        self._ready: set[int] = set()  # complete batches the trainer has not taken
        self._refilled: Counter = Counter()  # batch -> replacement groups ordered

    def due(self, version: int) -> int | None:
        """The next batch if it may start at `version` (and counts it started), else None."""
        if ((self.last_batch is None or self.next_batch < self.last_batch)
                and self.next_batch <= version + self.max_staleness and len(self._ready) < self.queue_size):
            self.next_batch += 1
            return self.next_batch - 1
        return None

    def ended(self, batch: int, rewards: Sequence[float]) -> bool:
        """A group of `batch` ended with `rewards`. -> whether its place goes to a re-drawn group."""
        if self._refilled[batch] < self.refills and not _has_signal(rewards):
            self._refilled[batch] += 1
            return True
        self._done[batch] += 1
        if self._done[batch] == self.groups_per_batch:
            self._ready.add(batch)
        return False

    def is_complete(self, batch: int) -> bool:
        """Every place of `batch` holds a finished group (and the trainer has not taken it)."""
        return batch in self._ready

    def refilled(self, batch: int) -> int:
        """Groups of `batch` that were re-drawn because their rewards did not vary."""
        return self._refilled[batch]

    def consumed(self, batch: int) -> None:
        """The trainer took `batch`: it no longer holds back admission."""
        self._ready.discard(batch)
        self._done.pop(batch, None)
        self._refilled.pop(batch, None)


def _has_signal(rewards: Sequence[float]) -> bool:
    """Two scored samples that differ: a group-relative advantage is not zero everywhere."""
    return len(rewards) >= 2 and max(rewards) != min(rewards)
