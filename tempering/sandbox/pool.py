"""The warm pool: sandboxes started ahead of time so that a job starts in milliseconds.

Up to `size` zygotes are kept; `acquire` hands out an idle one (a warm start) or, when none is
idle, starts a new sandbox (a cold start) that joins the pool if it is below size and is
closed after its job otherwise. `release` returns a zygote, or closes it when the job's
host side judged it unhealthy or it died; its replacement is started by the next acquire.
Each zygote serves one job at a time. Thread-safe. It does not run jobs.
"""

from __future__ import annotations

import threading
from typing import Callable

from tempering.sandbox.zygote import Zygote, ZygoteError


class WarmPool:
    def __init__(self, size: int, start: Callable[[], Zygote]) -> None:
        self.size = size
        self._start = start
        self._lock = threading.Lock()
        self._idle: list[Zygote] = []
        self._members: set[Zygote] = set()
        self._closed = False

    def fill(self) -> None:
        """Start sandboxes until the pool is full. Raises ZygoteError if one cannot start."""
        with self._lock:
            need = self.size - len(self._members)
        for z in self._start_many(need):
            z.reusable = True
            with self._lock:
                self._members.add(z)
                self._idle.append(z)

    def _start_many(self, n: int) -> list[Zygote]:
        # Start in parallel: each cold start is mostly waiting for bwrap and the interpreter.
        results: list = [None] * n

        def start(i: int) -> None:
            results[i] = self._start_or_error()

        threads = [threading.Thread(target=start, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        errors = [r for r in results if isinstance(r, Exception)]
        if errors:
            for r in results:
                if isinstance(r, Zygote):
                    r.close()
            raise errors[0]
        return results

    def _start_or_error(self) -> Zygote | Exception:
        try:
            return self._start()
        except ZygoteError as e:
            return e

    def acquire(self) -> tuple[Zygote, bool]:
        """(zygote, warm). Raises ZygoteError when a cold start fails."""
        while True:
            with self._lock:
                z = self._idle.pop() if self._idle else None
            if z is None:
                break
            if z.alive():
                return z, True
            self._drop(z)
        z = self._start()
        with self._lock:
            if not self._closed and len(self._members) < self.size:
                self._members.add(z)
                z.reusable = True
        return z, False

    def release(self, z: Zygote, healthy: bool) -> None:
        with self._lock:
            keep = healthy and not self._closed and z in self._members and z.alive()
            if keep:
                self._idle.append(z)
        if not keep:
            self._drop(z)

    def _drop(self, z: Zygote) -> None:
        with self._lock:
            self._members.discard(z)
        z.close()

    def close(self) -> None:
        """Close idle zygotes now; busy ones are closed when released."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for z in idle:
            self._drop(z)
