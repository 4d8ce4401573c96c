"""`NodeSandbox`: a node's sandbox service, with its local scheduler in front of the backend.

It is a `Sandbox` like the backend it wraps, and the only one the node's episodes, sessions
and verifiers use: every run waits for a slot (as many as the backend's workers) in the order
`LocalScheduler` decides, from the run's tag (its domain, or for a served agent run its tenant;
evaluation jobs one priority level up)
and memory limit, under the slot quotas and priorities the global scheduler hands down
(`set_policy`). Sessions it opens run their commands through it, so each command queues as a
job of its own. It keeps the sandbox seconds each task's samples used, for the global
scheduler's accounting (with `count_jobs`, for run.deterministic, one second a job: no wall
clock), and reports queue lengths and waits. A run that waits longer than
`wait_s` for a slot, or whose caller aborts it while it waits, does not run: it ends as
`sandbox_error` or `killed`, like any other infrastructure failure or abort.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from typing import Mapping

from tempering.records import ExecReason, ExecResult
from tempering.sandbox.request import Abort, ExecRequest, Sandbox
from tempering.scheduler.local import Job, LocalScheduler, NodeStats

class NodeSandbox:
    def __init__(self, backend: Sandbox, slots: int, memory_mb: int, default_memory_mb: int,
                 aging_s: float = 30.0, wait_s: float = 300.0, count_jobs: bool = False):
        self.backend, self.name = backend, backend.name
        self.local = LocalScheduler(slots, memory_mb, aging_s=aging_s)
        self._default_mb, self._wait_s = default_memory_mb, wait_s
        self._priorities: dict[str, int] = {}
        self._cond = threading.Condition()
        self._task_seconds: dict[str, float] = defaultdict(float)  # task id -> sandbox seconds of its samples
        self._count_jobs = count_jobs  # run.deterministic: a job is charged one second, whatever it took

    def set_policy(self, quotas: Mapping[str, float], priorities: Mapping[str, int]) -> None:
        """The global scheduler's slot quotas (shares) and domain priorities for this node (or,
        serving, the tenants' shares and priorities)."""
        with self._cond:
            self._priorities = dict(priorities)
            self.local.set_quotas(quotas)
            self._dispatch()

    def run(self, request: ExecRequest, abort: Abort | None = None) -> ExecResult:
        tag = request.tag
        key = tag.tenant or tag.domain or "-"  # what the quotas and priorities are of
        priority = self._priorities.get(key, 0) + (1 if tag.eval else 0)
        job = Job(key, priority, request.memory_mb or self._default_mb)
        forget = abort.when_fired(self._wake) if abort is not None else None  # a wait ends when it fires
        try:
            with self._cond:
                self.local.submit(job, time.monotonic())
                self._dispatch()
                deadline = time.monotonic() + self._wait_s
                while job.started is None:
                    late = time.monotonic() > deadline
                    if late or (abort is not None and abort.fired):
                        self.local.cancel(job)
                        self._dispatch()
                        if late:
                            return ExecResult(ExecReason.SANDBOX_ERROR, None, error=(
                                f"waited {self._wait_s:g} s for one of the node's {self.local.slots} sandbox slots"))
                        return ExecResult(ExecReason.KILLED, None, error="aborted while waiting for a sandbox slot")
                    self._cond.wait(deadline - time.monotonic())  # woken by a slot freed or the abort
        finally:
            if forget is not None:
                forget()
        try:
            result = self.backend.run(request, abort)
        finally:
            with self._cond:
                self.local.finish(job, time.monotonic())
                self._dispatch()
        if tag.sample:
            with self._cond:
                self._task_seconds[tag.sample.rsplit("/", 1)[0]] += 1.0 if self._count_jobs else result.wall_s
        return result

    @property
    def toolchain(self):
        """The backend's toolchain (what its sessions see)."""
        return self.backend.toolchain

    def open_session(self, spec, runner: Sandbox | None = None):
        return self.backend.open_session(spec, runner or self)

    def take_seconds(self, task_id: str) -> float:
        """The sandbox seconds the samples of `task_id` used so far (and forget them)."""
        with self._cond:
            return self._task_seconds.pop(task_id, 0.0)

    def report(self) -> NodeStats:
        with self._cond:
            return self.local.report()

    def close(self) -> None:
        self.backend.close()

    def _wake(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def _dispatch(self) -> None:
        """Start every job the local scheduler lets start now (their threads are waiting)."""
        started = False
        now = time.monotonic()
        while self.local.next(now) is not None:
            started = True
        if started:
            self._cond.notify_all()
