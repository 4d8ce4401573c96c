"""`Inbox`: what every rollout replica sends back, taken by the trainer from one place.

Each replica writes into a queue of its own, never into one shared with the others: a local
worker killed while writing into a multiprocessing queue leaves that queue's write lock held
(and half a message in its pipe), which would wedge every other writer of the queue for good.
Here a thread per replica moves its items into one in-process queue, which the trainer waits on
like any `DeadlineQueue` (deadline, stop event, failed workers). A replica removed is no longer
read: its thread is left to end (it may be stuck on that half message; it is a daemon) and its
queue is never read or drained again. `close` waits for the threads (before the runtime shuts
down). The inbox neither orders nor files what it carries (`service`).
"""

from __future__ import annotations

import queue
import threading
from dataclasses import dataclass
from typing import Generic

from tempering.runtime.interface import SLICE_S, DeadlineQueue, T

JOIN_S = 10 * SLICE_S  # a reading thread's last look: SLICE_S, plus a remote call's own time

@dataclass(frozen=True)
class _Delivery(Generic[T]):
    """An item read from replica `source`'s queue, or the error reading it raised while the
    replica was live (the trainer re-raises it)."""

    source: str
    item: T | None = None
    error: BaseException | None = None


class Inbox(DeadlineQueue[T]):
    def __init__(self, what: str):
        self.what = what  # "scored groups", "evaluations": for the reading thread's name and errors
        self._local: queue.Queue[_Delivery[T]] = queue.Queue()  # unbounded: each source is bounded by admission
        self._sources: dict[str, tuple[DeadlineQueue[T], threading.Event]] = {}
        self._threads: list[threading.Thread] = []
        self._closed = threading.Event()

    def add(self, name: str, source: DeadlineQueue[T]) -> None:
        """Read `source`, replica `name`'s queue, from now on."""
        gone = threading.Event()
        self._sources[name] = (source, gone)
        thread = threading.Thread(target=self._forward, args=(name, source, gone), name=f"{self.what} of {name}",
                                  daemon=True)
        thread.start()
        self._threads.append(thread)

    def remove(self, name: str) -> None:
        """Stop reading replica `name`'s queue (its replica was lost)."""
        _, gone = self._sources.pop(name)
        gone.set()

    def close(self) -> None:
        """Stop every reading thread; throw away what the live replicas' queues still hold. The
        threads are waited for (each ends within its next look, SLICE_S): on Ray a thread still
        inside a call when the runtime shuts down can crash the process."""
        self._closed.set()
        for thread in self._threads:
            thread.join(timeout=JOIN_S)  # a lost local replica's thread may stay stuck (a daemon)
        for source, _ in self._sources.values():
            source.drain()
        self.drain()

    def _forward(self, name: str, source: DeadlineQueue[T], gone: threading.Event) -> None:
        while not gone.is_set() and not self._closed.is_set():
            try:
                got, item = source.try_get(SLICE_S, f"{self.what} of {name}")
            except Exception as e:  # noqa: BLE001 - handed to the trainer, which raises it
                if not gone.is_set() and not self._closed.is_set():
                    self._local.put(_Delivery(name, error=e))
                return
            if got:
                self._local.put(_Delivery(name, item))

    # -- DeadlineQueue ------------------------------------------------------------------------------------
    def _take(self, wait: float, component: str) -> tuple[bool, T | None]:
        try:
            got = self._local.get(timeout=wait) if wait > 0 else self._local.get_nowait()
        except queue.Empty:
            return False, None
        if got.error is not None:
            raise RuntimeError(f"{self.what} of {got.source}: reading its queue failed") from got.error
        return True, got.item

    def _offer(self, item: T, wait: float, component: str) -> bool:
        self._local.put(_Delivery("", item))
        return True

    def try_put(self, item: T) -> bool:
        self._local.put(_Delivery("", item))
        return True

    def drain(self) -> None:
        while True:
            try:
                self._local.get_nowait()
            except queue.Empty:
                return
