"""`Hub`: the Ray runtime's bounded queues and events, as one asyncio object.

`runtime.ray` runs one `Hub` as an asyncio actor, so every queue and event of a run costs one
process, not one each. Every wait here ends at the caller's `wait` (at most a slice of the
caller's deadline: the caller loops, checking its stop event and workers in between); nothing
blocks the event loop, so one waiter never holds up another. It does not import Ray and knows
nothing of callers, deadlines or components: `runtime.ray` names those in its errors.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Callable


class _Queue:
    def __init__(self, maxsize: int):
        self.items: deque[object] = deque()
        self.maxsize = maxsize  # 0: unbounded, as multiprocessing's queues
        self.changed = asyncio.Condition()

    def full(self) -> bool:
        return 0 < self.maxsize <= len(self.items)


class Hub:
    def __init__(self):
        self._queues: dict[int, _Queue] = {}
        self._events: dict[int, asyncio.Event] = {}

    async def ready(self) -> bool:
        return True

    async def new_queue(self, maxsize: int) -> int:
        self._queues[len(self._queues)] = _Queue(maxsize)
        return len(self._queues) - 1

    async def new_event(self) -> int:
        self._events[len(self._events)] = asyncio.Event()
        return len(self._events) - 1

    async def put(self, qid: int, box: list, wait: float) -> bool:
        """Append box[0] if there is room within `wait` seconds."""
        q = self._queues[qid]
        async with q.changed:
            if not await _until(q.changed, lambda: not q.full(), wait):
                return False
            q.items.append(box[0])
            q.changed.notify_all()
            return True

    async def try_put(self, qid: int, box: list) -> bool:
        return await self.put(qid, box, 0.0)

    async def get(self, qid: int, wait: float) -> tuple[bool, object]:
        """(True, the oldest item) if there is one within `wait` seconds, else (False, None)."""
        q = self._queues[qid]
        async with q.changed:
            if not await _until(q.changed, lambda: bool(q.items), wait):
                return False, None
            item = q.items.popleft()
            q.changed.notify_all()
            return True, item

    async def drain(self, qid: int) -> int:
        q = self._queues[qid]
        async with q.changed:
            dropped = len(q.items)
            q.items.clear()
            q.changed.notify_all()
            return dropped

    async def set_event(self, eid: int, value: bool) -> None:
        if value:
            self._events[eid].set()
        else:
            self._events[eid].clear()

    async def wait_event(self, eid: int, wait: float) -> bool:
        event = self._events[eid]
        if not event.is_set() and wait > 0:
            try:
                await asyncio.wait_for(event.wait(), wait)
            except asyncio.TimeoutError:
                pass
        return event.is_set()


async def _until(changed: asyncio.Condition, ready: Callable[[], bool], wait: float) -> bool:
    """With `changed` held: wait up to `wait` seconds for `ready()`. The answer is read under the
    lock after the wait, so a change that raced with the timeout is not missed."""
    if not ready() and wait > 0:
        try:
            await asyncio.wait_for(changed.wait_for(ready), wait)
        except asyncio.TimeoutError:
            pass
    return ready()
