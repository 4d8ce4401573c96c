"""`StopRequest`: when a run should end early and cleanly: its time budget is spent, or SIGINT or
SIGTERM arrived (the run stopped by hand or by a cluster scheduler).

The training loop polls it at step boundaries and then finishes the run as after its last step
(checkpoint, final evaluation, summary). The first signal asks for that; a second one of either
kind interrupts at once with KeyboardInterrupt. Handlers are installed explicitly, so a run
started in the background of a non-interactive shell, which inherits SIGINT ignored, still
stops cleanly on it. Worker processes ignore both signals (`runtime.local`): the parent alone
decides how the run ends. It does not kill anything itself.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from types import FrameType
from typing import Callable

SIGNALS = (signal.SIGINT, signal.SIGTERM)
_Handler = Callable[[int, FrameType | None], object] | int | None  # what signal.getsignal returns


class StopRequest:
    def __init__(self, max_seconds: float = 0.0, started: float | None = None):
        start = time.monotonic() if started is None else started
        self.deadline = start + max_seconds if max_seconds else None
        self.reason = ""  # "SIGINT", "SIGTERM" or "run.max_seconds" once requested
        self._event = threading.Event()
        self._previous: dict[int, _Handler] = {}

    def is_set(self) -> bool:
        """True once a signal arrived or the time budget is spent (the same interface as an Event,
        so it can be handed to waits that take a stop event)."""
        if not self._event.is_set() and self.deadline is not None and time.monotonic() >= self.deadline:
            self.request("run.max_seconds")
        return self._event.is_set()

    def request(self, reason: str) -> None:
        if not self._event.is_set():
            self.reason = reason
            self._event.set()

    def __enter__(self) -> "StopRequest":
        if threading.current_thread() is threading.main_thread():  # signal handlers live there only
            for sig in SIGNALS:
                self._previous[sig] = signal.signal(sig, self._on_signal)
        return self

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if self._event.is_set():
            raise KeyboardInterrupt(f"{name} while the run was already finishing")
        self.request(name)
        print(f"\n[tempering] {name}: finishing the run after this step (checkpoint, final evaluation, "
              f"summary); send it again to stop at once", file=sys.stderr, flush=True)
