"""`RolloutService`: the trainer's handle on its rollout worker, driven by the global scheduler.

It starts the worker (`runtime.local`), registers it with the `GlobalScheduler` as an engine
replica (and, when a domain runs code, a sandbox node with the backend's slots), and sends it
the groups the scheduler admits: at start, after every publish of new weights (the staleness
bound moves) and after every batch the trainer takes (the buffer has room). Scored groups come
back one by one; each is reported to the scheduler (usage, pass rates, curriculum) and filed in
its batch, and `next_batch` returns batches in order once complete (with dynamic sampling, a
group without reward variance stays in its batch, for the buffer to drop, and the scheduler
orders one more in its place). It tells the scheduler the
throughputs its fairness normalises by, as measured: the engine's tokens per second of
generation and the groups per second the trainer takes (a batch's groups over the wall time
since the previous batch, evaluations left out). It asks the worker for
held-out evaluations too (on the worker's engine and sandbox: the trainer process builds
neither). Every wait has the run's stall deadline and names the worker; a worker that raised or
died surfaces at the next wait. Each batch carries what weight loads cost the worker
(`SyncStats`) and the engine's busy seconds; `publish` returns how long its copy took.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from tempering.evaluation import EvalResult
from tempering.models import Decoder
from tempering.records import Group
from tempering.rollout.worker import EvalRequest, GroupDone, RolloutSpec, run_rollout_worker
from tempering.runtime import LocalRuntime
from tempering.scheduler.global_ import GlobalScheduler, NodePolicy
from tempering.weights import SyncStats, WeightStore

REPLICA = "rollout-0"  # the embedded runtime's one engine replica, which is also its one sandbox node


@dataclass
class RolloutBatch:
    index: int
    version: int  # the oldest engine version any of its groups started at
    groups: list[Group]
    generated_tokens: int
    seconds: float  # from its groups' dispatch to its last group's score
    scheduler: dict[str, dict[str, float]]  # per domain: shares, weight, level, pass rate (GlobalScheduler.metrics)
    node: dict[str, Any]  # the sandbox node's queue and waits over the batch (empty without a sandbox)
    startup_s: float | None = None  # on the worker's first batch: from spawn to ready to generate
    # the runner's time since the previous batch: engine steps, and thread time (overlapping
    # them) opening workspaces, running tools and scoring
    runner_seconds: dict[str, float] = field(default_factory=dict)
    refilled: int = 0  # groups re-drawn in place of ones whose rewards did not vary (dynamic sampling)
    sync: SyncStats = field(default_factory=SyncStats)  # the worker's weight loads since the previous batch
    sync_total: SyncStats = field(default_factory=SyncStats)  # ... and since it started
    engine_busy_s: float = 0.0  # wall time inside engine steps since the worker started (idle = 1 - busy/wall)


@dataclass
class _Open:
    dispatched: float
    groups: list[tuple[int, Group, int]] = field(default_factory=list)  # (order id, group, start version)
    waits: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    queued: list[int] = field(default_factory=list)


class RolloutService:
    def __init__(self, spec: RolloutSpec, model: Decoder, version: int, scheduler: GlobalScheduler):
        self.timeout = spec.stall_timeout_s
        self.scheduler = scheduler
        runtime = LocalRuntime()
        self.store = WeightStore(model, runtime.ctx)
        self.store.publish(model, version)
        # room for every group admission lets run at once, so the worker never waits to hand one back
        room = (scheduler.groups_per_batch + scheduler.refills) * (scheduler.max_staleness + scheduler.queue_size + 2)
        self.groups, self._requests, self._replies = runtime.queue(room), runtime.ctx.Queue(), runtime.queue(1)
        self._stop = runtime.event()
        self.worker = runtime.spawn("rollout", run_rollout_worker, spec, self.store, self.groups, self._requests,
                                    self._replies, self._stop)
        self._open: dict[int, _Open] = {}
        self._next = scheduler.next_batch
        self._policy: NodePolicy | None = None
        self._reported: dict[str, float] = {}
        self._seconds: dict[str, float] = {}
        self._sync, self._sync_reported = SyncStats(), SyncStats()
        self._startup: float | None = None
        self._heldout = None
        self._handed: float | None = None  # when the last batch went to the trainer
        scheduler.add_replica(REPLICA)
        if spec.needs_sandbox:
            scheduler.add_node(REPLICA, spec.sandbox.workers)
        self._dispatch()

    def publish(self, model: Decoder, version: int) -> float:
        """Make `model`'s weights `version` for the worker. -> seconds the copy took."""
        start = time.perf_counter()
        self.store.publish(model, version)
        seconds = time.perf_counter() - start
        self._dispatch()
        return seconds

    def next_batch(self, stop: Any) -> RolloutBatch | None:
        """The next batch, in order; None if `stop` was set while waiting."""
        self._dispatch()
        while not self._complete(self._next):
            done: GroupDone | None = self.groups.get(self.timeout, "rollout worker", [self.worker], stop)
            if done is None:
                return None
            self._file(done)
            self._dispatch()  # the groups re-drawn for ones without signal (buffer.dynamic_sampling)
        batch = self._assemble(self._next)
        self.scheduler.consumed(self._next)
        self._next += 1
        now = time.perf_counter()
        if self._handed is not None:  # the wall time of one batch: the rate the trainer takes groups at
            self.scheduler.measured_group_rate(self.scheduler.groups_per_batch / max(now - self._handed, 1e-6))
        self._handed = now
        self._dispatch()
        return batch

    def evaluate(self, label: str) -> EvalResult:
        """Greedy held-out evaluation of the version published last."""
        if self._heldout is None:
            self._heldout = self.scheduler.pool.heldout()
        self._requests.put(EvalRequest(label, self.store.version, self._heldout))
        self._handed = None  # the time until the next batch is the evaluation's, not the trainer's
        return self._replies.get(self.timeout, f"rollout worker (evaluation {label})", [self.worker])

    def close(self) -> None:
        self._stop.set()
        self.groups.drain()
        self.worker.join(timeout=10)
        # orders the worker will never read must not hold this process's exit (the queue's feeder
        # thread would wait for room in the pipe)
        self._requests.cancel_join_thread()

    def __enter__(self) -> "RolloutService":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- internals -----------------------------------------------------------------------------------------
    def _dispatch(self) -> None:
        """Send what the scheduler admits now, and the node's policy when it changed."""
        orders = self.scheduler.admit(self.store.version)
        if self.scheduler.nodes:
            policy = self.scheduler.node_policy()
            if policy != self._policy:
                self._requests.put(policy)
                self._policy = policy
        now = time.perf_counter()
        for order in orders:
            self._open.setdefault(order.batch, _Open(now))
            self._requests.put(order)

    def _file(self, done: GroupDone) -> None:
        self.scheduler.complete(done.report)
        batch = self._open[done.order.batch]
        batch.groups.append((done.order.id, done.group, done.version))
        if done.node is not None:
            for domain, waits in done.node.waits.items():
                batch.waits[domain] += waits
            batch.queued.append(done.node.queued)
        if done.startup_s is not None:
            self._startup = done.startup_s
        self._seconds = done.runner_seconds
        self._sync = done.sync

    def _complete(self, b: int) -> bool:
        return b in self._open and self.scheduler.is_complete(b)

    def _assemble(self, b: int) -> RolloutBatch:
        batch = self._open.pop(b)
        batch.groups.sort(key=lambda x: x[0])
        groups = [g for _, g, _ in batch.groups]
        split = {k: v - self._reported.get(k, 0.0) for k, v in self._seconds.items()}
        self._reported = self._seconds
        sync, self._sync_reported = self._sync.minus(self._sync_reported), self._sync
        startup, self._startup = self._startup, None
        tokens = sum(t.num_model_tokens for g in groups for t in g.trajectories)
        if split.get("generate", 0.0) > 0:
            self.scheduler.measured(REPLICA, tokens / split["generate"])
        return RolloutBatch(b, min(v for _, _, v in batch.groups), groups, tokens,
                            time.perf_counter() - batch.dispatched, self.scheduler.metrics(),
                            _node_record(batch) if batch.queued else {}, startup, split,
                            self.scheduler.refilled(b), sync=sync, sync_total=self._sync,
                            engine_busy_s=self._seconds.get("generate", 0.0))


def _node_record(batch: _Open) -> dict[str, Any]:
    waits = sorted(w for ws in batch.waits.values() for w in ws)
    pick = (lambda q: waits[min(len(waits) - 1, int(q * len(waits)))]) if waits else (lambda q: 0.0)
    return {"queued": max(batch.queued), "jobs": len(waits), "wait_p50": pick(0.5), "wait_p99": pick(0.99),
            "wait": {d: sum(ws) / len(ws) for d, ws in batch.waits.items() if ws}}
