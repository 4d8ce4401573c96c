"""The warm pool: sandboxes started ahead of time, each with the next job's init prepared.

Up to `size` zygotes are kept. A zygote is handed out (`acquire`) only with a prepared init;
as soon as its job is dispatched (`dispatched`), a background thread has it prepare the next
one, which includes the slow cgroup move, while the job runs. `acquire` prefers a ready
zygote, waits briefly for one still preparing, and otherwise starts and prepares a new
sandbox (a cold start) that joins the pool if it is below size and is closed after its job
otherwise. `release` returns a zygote, or drops it when the job's host side judged it
unhealthy, its preparation failed or it died. Thread-safe. It does not run jobs.
"""

from __future__ import annotations

import queue
import sys
import threading
import time
from typing import Callable

from tempering.sandbox.zygote import Zygote, ZygoteError

WAIT_FOR_PREPARING_S = 5.0  # longer than a preparation takes even on a busy machine


class WarmPool:
    def __init__(self, size: int, start: Callable[[], Zygote], prepare: Callable[[Zygote], None]) -> None:
        self.size = size
        self._start, self._prepare = start, prepare
        self._cond = threading.Condition()
        self._members: set[Zygote] = set()
        self._ready: list[Zygote] = []  # idle, with a prepared init
        self._busy: set[Zygote] = set()
        self._preparing: set[Zygote] = set()
        self._doomed: set[Zygote] = set()  # to close once neither busy nor preparing
        self._closed = False
        self._todo: queue.SimpleQueue[Zygote | None] = queue.SimpleQueue()
        self._worker = threading.Thread(target=self._prepare_loop, name="tempering-sandbox-prepare", daemon=True)
        self._worker.start()

    def fill(self) -> None:
        """Start and prepare sandboxes until the pool is full (in parallel). Raises ZygoteError."""
        results: list = [None] * self.size

        def cold(i: int) -> None:
            try:
                results[i] = self._start_prepared()
            except ZygoteError as e:
                results[i] = e

        threads = [threading.Thread(target=cold, args=(i,)) for i in range(self.size)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        errors = [r for r in results if isinstance(r, ZygoteError)]
        started = [r for r in results if not isinstance(r, ZygoteError)]
        if errors:
            for z in started:
                z.close()
            raise errors[0]
        with self._cond:
            self._members.update(started)
            self._ready.extend(started)

    def _start_prepared(self) -> Zygote:
        z = self._start()
        try:
            self._prepare(z)
        except ZygoteError:
            z.close()
            raise
        return z

    def acquire(self) -> tuple[Zygote, bool]:
        """(zygote with a prepared init, warm). Raises ZygoteError when a cold start fails."""
        deadline = time.monotonic() + WAIT_FOR_PREPARING_S
        dead = []
        with self._cond:
            while True:
                while self._ready:
                    z = self._ready.pop()
                    if z.alive():
                        self._busy.add(z)
                        return z, True
                    self._members.discard(z)
                    dead.append(z)
                idle_preparing = any(z not in self._busy for z in self._preparing)
                if not idle_preparing or time.monotonic() >= deadline:
                    break
                self._cond.wait(timeout=max(0.0, deadline - time.monotonic()))
        for z in dead:
            z.close()
        z = self._start_prepared()
        with self._cond:
            if not self._closed and len(self._members) < self.size:
                self._members.add(z)
            self._busy.add(z)
        return z, False

    def dispatched(self, z: Zygote) -> None:
        """Its job is handed over: prepare the next init now, in the background."""
        with self._cond:
            if z in self._members and not self._closed:
                self._preparing.add(z)
                self._todo.put(z)

    def release(self, z: Zygote, healthy: bool) -> None:
        with self._cond:
            self._busy.discard(z)
            if not healthy or z not in self._members or self._closed or not z.alive():
                self._doomed.add(z)
            self._settle(z)

    def _prepare_loop(self) -> None:
        while (z := self._todo.get()) is not None:
            try:
                self._prepare(z)
            except ZygoteError as e:
                print(f"tempering sandbox: replacing a sandbox: {e}", file=sys.stderr)
                with self._cond:
                    self._doomed.add(z)
            with self._cond:
                self._preparing.discard(z)
                self._settle(z)

    def _settle(self, z: Zygote) -> None:
        """Under the lock: once `z` is neither running a job nor preparing, make it ready or
        close it (on a thread of its own: closing waits for the sandbox to end)."""
        if z in self._busy or z in self._preparing:
            return
        if z in self._doomed or self._closed:
            self._doomed.discard(z)
            self._members.discard(z)
            threading.Thread(target=z.close, name="tempering-sandbox-close").start()
        else:
            self._ready.append(z)
            self._cond.notify_all()

    def close(self) -> None:
        """Close idle zygotes now; busy ones are closed when released."""
        with self._cond:
            self._closed = True
            idle, self._ready = self._ready, []
            self._members.difference_update(idle)
        self._todo.put(None)
        self._worker.join()
        for z in idle:
            z.close()
