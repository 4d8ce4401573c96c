"""The embedded runtime: worker processes, bounded queues with deadlines, failure propagation,
blobs in shared memory.

Workers are spawned (not forked, so no lock or thread state leaks into them) with torch's
multiprocessing, which moves shared-memory tensors between processes without copying. Every wait
has a deadline; when it passes, `Stall` names the component that did not deliver. A worker that
dies or raises is reported with its traceback at the next wait, never as a silent hang. Every
worker runs on this machine: a spawn's `Resources` reserve nothing here (`runtime.ray` places
workers by them), and there are no placement groups.
"""

from __future__ import annotations

import copy
import os
import queue
import signal
import sys
from multiprocessing.context import SpawnContext
from multiprocessing.process import BaseProcess
from multiprocessing.queues import Queue as ProcessQueue
from typing import Callable, Generic

import torch.multiprocessing as tmp

from tempering.runtime.interface import DeadlineQueue, Event, Failure, Resources, Stall, T, WorkerFailed, is_state_dict

__all__ = ["LocalRuntime", "BoundedQueue", "Worker", "LocalBlob", "Stall", "WorkerFailed", "threads_per_process"]


class Worker:
    def __init__(self, name: str, process: BaseProcess, errors: ProcessQueue[Failure]):
        self.name, self.process, self.errors = name, process, errors

    def check(self) -> None:
        """Raise `WorkerFailed` if the worker raised or died."""
        try:
            failure: Failure | None = self.errors.get_nowait()
        except queue.Empty:
            failure = None
        if failure is not None:
            raise failure.error(self.name)
        if not self.process.is_alive() and self.process.exitcode not in (0, None):
            raise WorkerFailed(self.name, f"died with exit code {self.process.exitcode}", died=True)

    def started(self, timeout: float) -> str:
        """Where the worker runs: here (the process exists once `spawn` returns)."""
        return "local"

    def placed(self) -> bool:
        return True

    def alive(self) -> bool:
        return self.process.is_alive()

    def join(self, timeout: float) -> None:
        self.process.join(timeout)
        if self.process.is_alive():
            self.process.kill()  # workers ignore SIGTERM (see _entry)
            self.process.join(5)


class BoundedQueue(DeadlineQueue[T]):
    def __init__(self, ctx: SpawnContext, maxsize: int):
        self._q: ProcessQueue[T] = ctx.Queue(maxsize)

    def _offer(self, item: T, wait: float, component: str) -> bool:
        try:
            self._q.put(item, timeout=wait)
            return True
        except queue.Full:
            return False

    def _take(self, wait: float, component: str) -> tuple[bool, T | None]:
        try:
            return True, self._q.get(timeout=wait) if wait > 0 else self._q.get_nowait()
        except queue.Empty:
            return False, None

    def try_put(self, item: T) -> bool:
        try:
            self._q.put_nowait(item)
            return True
        except queue.Full:
            return False

    def drain(self) -> None:
        # qsize counts items still on their way through a putter's feeder thread, which get_nowait
        # would miss; one that never arrives (its putter died) ends the drain at the short wait
        try:
            for _ in range(self._q.qsize()):
                self._q.get(timeout=1.0)
        except queue.Empty:
            pass
        # Items still in this process's feeder thread would otherwise hold its exit: the thread
        # waits for room in a pipe no one reads any more (seen with 100,000 orders left unread).
        self._q.cancel_join_thread()


class LocalBlob(Generic[T]):
    """A snapshot taken by `LocalRuntime.put_blob`; it travels to workers by queue or argument,
    its tensors as shared memory (torch's multiprocessing passes their handles, not their bytes)."""

    def __init__(self, obj: T):
        self._obj = obj

    def get(self, timeout: float, component: str) -> T:
        """The object; here it is already at hand, so nothing is waited for."""
        return self._obj


class LocalRuntime:
    remote = False  # queues and events are read in this machine's shared memory, not by remote calls
    host = "127.0.0.1"  # where workers reach this process (for a rendezvous): they share its machine

    def __init__(self):
        self.ctx = tmp.get_context("spawn")

    def queue(self, maxsize: int, name: str = "queue") -> BoundedQueue[T]:
        """A queue of at most `maxsize` items (unbounded when it is 0). `name`, like an event's,
        is for the Ray runtime's messages: a local queue cannot fail to answer."""
        return BoundedQueue(self.ctx, maxsize)

    def event(self, name: str = "event") -> Event:
        return self.ctx.Event()

    def spawn(self, name: str, target: Callable[..., None], *args: object, resources: Resources | None = None) -> Worker:
        errors = self.ctx.Queue()
        # Not daemonic: a worker may start processes of its own (heavy verifiers' pool), which
        # multiprocessing forbids daemons. The parent stops and joins it (`Worker.join`), and a
        # worker whose parent is gone stalls at its next wait and ends.
        process = self.ctx.Process(target=_entry, args=(name, target, args, errors), name=name, daemon=False)
        process.start()
        return Worker(name, process, errors)

    def has_room(self, resources: Resources | None = None) -> bool:
        """Whether a worker asking for `resources` would start now: on this machine, always."""
        return True

    def put_blob(self, obj: T) -> LocalBlob[T]:
        """A snapshot of `obj` (later changes to it do not show): a state dict's tensors are
        copied into shared memory, anything else deep-copied."""
        if is_state_dict(obj):
            return LocalBlob({k: v.detach().clone().share_memory_() for k, v in obj.items()})
        return LocalBlob(copy.deepcopy(obj))

    def close(self) -> None:
        """Nothing to release: each worker is joined by whoever spawned it."""


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


def _entry(name: str, target: Callable[..., None], args: tuple, errors: ProcessQueue[Failure]) -> None:
    # The parent decides how a run ends (runtime.stop): a Ctrl-C sent to the whole process
    # group, or a scheduler's SIGTERM to every process, must not kill a worker mid-batch.
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    try:
        target(*args)
    except BaseException as e:  # noqa: BLE001 - report everything to the parent, then exit non-zero
        errors.put(Failure.of(e))
        raise SystemExit(1) from None
