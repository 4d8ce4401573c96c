"""The embedded runtime: worker processes, bounded queues with deadlines, failure propagation.

Workers are spawned (not forked, so no lock or thread state leaks into them) with torch's
multiprocessing, which moves shared-memory tensors between processes without copying. Every wait
has a deadline; when it passes, `Stall` names the component that did not deliver. A worker that
dies or raises is reported with its traceback at the next wait, never as a silent hang.
"""

from __future__ import annotations

import os
import queue
import signal
import sys
import time
import traceback
from typing import Any, Callable, Sequence

import torch.multiprocessing as tmp

from tempering.errors import UserError


class Stall(RuntimeError):
    """A wait ran past its deadline; the message names the component that stalled."""


class WorkerFailed(RuntimeError):
    """A worker raised or died. `bad_input` is true when it raised `UserError` (input the user
    must fix, whose message says it all); otherwise `traceback` is what to read."""

    def __init__(self, worker: str, message: str, traceback: str = "", bad_input: bool = False):
        super().__init__(f"worker {worker}: {message}")
        self.traceback, self.bad_input = traceback, bad_input


class Worker:
    def __init__(self, name: str, process: Any, errors: Any):
        self.name, self.process, self.errors = name, process, errors

    def check(self) -> None:
        """Raise `WorkerFailed` if the worker raised or died."""
        try:
            name, bad_input, message, tb = self.errors.get_nowait()
        except queue.Empty:
            name = None
        if name is not None:
            raise WorkerFailed(name, message, tb, bad_input)
        if not self.process.is_alive() and self.process.exitcode not in (0, None):
            raise WorkerFailed(self.name, f"died with exit code {self.process.exitcode}")

    def join(self, timeout: float) -> None:
        self.process.join(timeout)
        if self.process.is_alive():
            self.process.kill()  # workers ignore SIGTERM (see _entry)
            self.process.join(5)


class BoundedQueue:
    def __init__(self, ctx: Any, maxsize: int):
        self._q = ctx.Queue(maxsize)

    def put(self, item: Any, timeout: float, component: str, stop: Any = None) -> bool:
        """Block until there is room; False if `stop` was set meanwhile."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                self._q.put(item, timeout=0.2)
                return True
            except queue.Full:
                if stop is not None and stop.is_set():
                    return False
                if time.monotonic() > deadline:
                    raise Stall(f"{component}: queue stayed full for {timeout:g} s") from None

    def try_put(self, item: Any) -> bool:
        """Put without waiting; False when the queue is full."""
        try:
            self._q.put_nowait(item)
            return True
        except queue.Full:
            return False

    def get(self, timeout: float, component: str, workers: Sequence[Worker] = (), stop: Any = None) -> Any:
        """The next item; None if `stop` was set meanwhile."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                return self._q.get(timeout=0.2)
            except queue.Empty:
                if stop is not None and stop.is_set():
                    return None
                for w in workers:
                    w.check()
                if time.monotonic() > deadline:
                    raise Stall(f"{component}: nothing arrived for {timeout:g} s") from None

    def drain(self) -> None:
        try:
            while True:
                self._q.get_nowait()
        except queue.Empty:
            pass


class LocalRuntime:
    def __init__(self):
        self.ctx = tmp.get_context("spawn")

    def queue(self, maxsize: int) -> BoundedQueue:
        return BoundedQueue(self.ctx, maxsize)

    def event(self) -> Any:
        return self.ctx.Event()

    def spawn(self, name: str, target: Callable[..., None], *args: Any) -> Worker:
        errors = self.ctx.Queue()
        # Not daemonic: a worker may start processes of its own (heavy verifiers' pool), which
        # multiprocessing forbids daemons. The parent stops and joins it (`Worker.join`), and a
        # worker whose parent is gone stalls at its next wait and ends.
        process = self.ctx.Process(target=_entry, args=(name, target, args, errors), name=name, daemon=False)
        process.start()
        return Worker(name, process, errors)


def threads_per_process(setting: int | str, processes: int) -> int:
    """torch threads for each of `processes` processes sharing this machine's cores: "auto" gives
    each an equal share (at least one); an explicit count that asks for more threads than there
    are cores is kept, with a warning, since the processes then slow each other down."""
    cores = len(os.sched_getaffinity(0))
    if setting == "auto":
        return max(1, cores // processes)
    if setting * processes > cores:
        print(f"[tempering] warning: run.threads = {setting} in each of {processes} processes asks for "
              f"{setting * processes} threads on {cores} cores; they will contend and slow each other down "
              f"(run.threads = 'auto' splits the cores)", file=sys.stderr, flush=True)
    return setting


def _entry(name: str, target: Callable[..., None], args: tuple, errors: Any) -> None:
    # The parent decides how a run ends (runtime.stop): a Ctrl-C sent to the whole process
    # group, or a scheduler's SIGTERM to every process, must not kill a worker mid-batch.
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    try:
        target(*args)
    except BaseException as e:  # noqa: BLE001 - report everything to the parent, then exit non-zero
        errors.put((name, isinstance(e, UserError), f"{type(e).__name__}: {e}", traceback.format_exc()))
        raise SystemExit(1) from None
