"""`Deadlines`: callbacks run when their deadlines pass, from one thread for all of them.

The reward service gives every verifier call a deadline when it starts; a thread cannot be
killed, so a call past its deadline is settled as failed by the callback here instead of by a
loop that looks at the clock. The thread sleeps until the earliest deadline (a condition wait
with that timeout) or until an earlier one is added; it starts with the first deadline and ends
at `close`. A callback must be quick and must not raise: it runs on this thread.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from typing import Callable


class Deadlines:
    def __init__(self, name: str):
        self.name = name
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = itertools.count()  # ties: in the order they were added
        self._cv = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closed = False

    def at(self, when: float, callback: Callable[[], None]) -> None:
        """Run `callback` once `time.monotonic()` passes `when` (never, if closed first)."""
        with self._cv:
            if self._closed:
                return
            heapq.heappush(self._heap, (when, next(self._seq), callback))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
                self._thread.start()
            self._cv.notify()

    def close(self) -> None:
        with self._cv:
            self._closed = True
            self._heap.clear()
            self._cv.notify()

    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._closed and (not self._heap or self._heap[0][0] > time.monotonic()):
                    self._cv.wait(self._heap[0][0] - time.monotonic() if self._heap else None)
                if self._closed:
                    return
                _, _, callback = heapq.heappop(self._heap)
            callback()
