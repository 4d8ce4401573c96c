"""`FairQueue`: the order in which waiting requests of many tenants reach the engine.

"fair": the waiting requests of the highest priority level go first; within a level, start-time
fair queueing by share. Each request costs the tokens it may generate (n x max_tokens); a tenant's
next request starts, in virtual time, where its previous one finished (cost / share later), and
never before the virtual time of the request served last, so a tenant that was idle gets no
credit for it and one that floods queues behind its own requests: a light tenant's request waits
for at most about one request of each other tenant of its level, whatever their backlogs. A
higher level is served first whenever it waits (its rate limit is what bounds it). "fifo": in
order of arrival, as a plain queue would. Thread-safe. It admits nothing itself: the engine loop
pops when it has room.
"""

from __future__ import annotations

import itertools
import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Generic, Literal, TypeVar

T = TypeVar("T")


@dataclass
class _Lane(Generic[T]):
    priority: int
    share: float
    waiting: deque = field(default_factory=deque)  # (start, seq, item), starts increasing
    finish: float = 0.0  # virtual finish of its last request queued


class FairQueue(Generic[T]):
    def __init__(self, mode: Literal["fair", "fifo"] = "fair"):
        if mode not in ("fair", "fifo"):
            raise ValueError(f"FairQueue: mode must be 'fair' or 'fifo', got {mode!r}")
        self.mode = mode
        self._lanes: dict[str, _Lane[T]] = {}
        self._virtual = 0.0  # the start of the request popped last
        self._seq = itertools.count()
        self._lock = threading.Lock()
        self._size = 0

    def push(self, tenant: str, item: T, cost: float, priority: int = 0, share: float = 1.0) -> None:
        assert cost >= 0 and share > 0, (cost, share)
        with self._lock:
            lane = self._lanes.setdefault(tenant, _Lane(priority, share))
            lane.priority, lane.share = priority, share
            start = max(self._virtual, lane.finish)
            lane.finish = start + cost / share
            lane.waiting.append((start, next(self._seq), item))
            self._size += 1

    def pop(self) -> T | None:
        """The request that goes next, or None when none waits."""
        with self._lock:
            best, key = None, None
            for lane in self._lanes.values():
                if lane.waiting:
                    start, seq, _ = lane.waiting[0]
                    k = (seq,) if self.mode == "fifo" else (-lane.priority, start, seq)
                    if key is None or k < key:
                        best, key = lane, k
            if best is None:
                return None
            start, _, item = best.waiting.popleft()
            self._virtual = max(self._virtual, start)
            self._size -= 1
            return item

    def remove(self, item: T) -> bool:
        """Take a request out that has not been popped (its client gave up)."""
        with self._lock:
            for lane in self._lanes.values():
                for entry in lane.waiting:
                    if entry[2] is item:
                        lane.waiting.remove(entry)
                        self._size -= 1
                        return True
        return False

    def __len__(self) -> int:
        return self._size

    def depths(self) -> dict[str, int]:
        """Requests waiting, per tenant (tenants seen so far, 0 included)."""
        with self._lock:
            return {name: len(lane.waiting) for name, lane in self._lanes.items()}
