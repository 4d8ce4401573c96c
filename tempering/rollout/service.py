"""`RolloutService`: the trainer's handle on its rollout workers, driven by the global scheduler.

It starts `replicas` workers on the runtime it is given (local processes or Ray actors),
registers each with the `GlobalScheduler` as an engine replica (and a sandbox node when a domain
runs code), sends each the groups the scheduler places on it, and files the scored groups that
come back through one `Inbox` into batches, which `next_batch` returns in order once complete.
It measures the throughputs the scheduler's fairness normalises by, asks one replica for held-out
evaluations, and puts every wait under the run's stall deadline. A replica whose worker died is
lost: its groups in flight are re-placed on the others (a result it sent for them is set aside);
with none left the run fails. Below `max_replicas` it starts one more replica whenever the
runtime has room. Each batch carries what weight loads cost the workers."""

from __future__ import annotations

import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field, fields
from typing import Any, Mapping

from tempering.evaluation import EvalResult
from tempering.models import Decoder
from tempering.records import Group
from tempering.rollout.replicas import Replica, Replicas
from tempering.rollout.worker import EvalRequest, GroupDone, RolloutSpec
from tempering.runtime import WorkerFailed
from tempering.scheduler.global_ import GlobalScheduler, GroupOrder
from tempering.weights import SyncStats

GROW_CHECK_S = 1.0  # below runtime.max_replicas: how often to ask the runtime for room (a call to Ray)
# how long a replica started for room may wait to be placed before it is given up (nothing waits
# on it meanwhile; on Ray, a new node's first worker process can take a minute on a busy machine)
GROW_PLACE_S = 120.0

@dataclass
class RolloutBatch:
    index: int
    version: int  # the oldest engine version any of its groups started at
    groups: list[Group]
    generated_tokens: int
    seconds: float  # from its groups' dispatch to its last group's score
    scheduler: dict[str, dict[str, float]]  # per domain: shares, weight, level, pass rate (GlobalScheduler.metrics)
    node: dict[str, Any]  # the sandbox nodes' queue and waits over the batch (empty without a sandbox)
    startup_s: float | None = None  # on the workers' first batch: from spawn to ready to generate
    # the runners' time since the previous batch: engine steps, and thread time (overlapping
    # them) opening workspaces, running tools and scoring
    runner_seconds: dict[str, float] = field(default_factory=dict)
    refilled: int = 0  # groups re-drawn in place of ones whose rewards did not vary (dynamic sampling)
    sync: SyncStats = field(default_factory=SyncStats)  # the workers' weight loads since the previous batch
    sync_total: SyncStats = field(default_factory=SyncStats)  # ... and since they started
    engine_busy_s: float = 0.0  # wall time inside engine steps since the workers started (idle = 1 - busy/wall)
    requeued: int = 0  # its groups re-placed on another replica after theirs was lost
    replicas: dict[str, int] = field(default_factory=dict)  # replica -> its groups in this batch


@dataclass
class _Open:
    dispatched: float
    groups: list[tuple[int, Group, int]] = field(default_factory=list)  # (order id, group, start version)
    waits: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    queued: list[int] = field(default_factory=list)
    tokens: Counter = field(default_factory=Counter)  # replica -> tokens its groups generated
    by_replica: Counter = field(default_factory=Counter)  # replica -> its groups
    requeued: int = 0


class RolloutService:
    def __init__(self, spec: RolloutSpec, model: Decoder, version: int, scheduler: GlobalScheduler, runtime: Any,
                 replicas: int = 1, resources: Mapping[str, float] | None = None, max_replicas: int = 0):
        self.timeout = spec.stall_timeout_s
        self.scheduler = scheduler
        # room for every group admission lets run at once, so a worker never waits to hand one back
        room = (scheduler.groups_per_batch + scheduler.refills) * (scheduler.max_staleness + scheduler.queue_size + 2)
        self.replicas = Replicas(runtime, spec, model, version, room, resources)
        self.groups, self._replies = self.replicas.groups, self.replicas.replies
        self.store = self.replicas.weights
        self._sandbox_slots = spec.sandbox.workers if spec.needs_sandbox else 0
        self._open: dict[int, _Open] = {}
        self._next = scheduler.next_batch
        self._reported: dict[str, dict[str, float]] = {}  # replica -> runner seconds at the last batch
        self._seconds: dict[str, dict[str, float]] = {}  # replica -> runner seconds now
        self._sync: dict[str, SyncStats] = {}
        self._sync_reported: dict[str, SyncStats] = {}
        self._startup: float | None = None
        self._heldout = None
        self._handed: float | None = None  # when the last batch went to the trainer
        self.requeued = self.superseded = 0
        self.filed: Counter = Counter()  # replica -> groups it sent that went into a batch
        self.max_replicas = max_replicas  # 0: none started beyond (or in place of) the first `replicas`
        # run.deterministic: no wall-clock measurement steers the scheduler, and a batch's groups
        # reach it in order (held until all came), whatever order they ended in
        self._deterministic = spec.deterministic
        self._held: dict[int, list[GroupDone]] = defaultdict(list)
        self._looked_for_room = time.monotonic()
        for _ in range(replicas):
            self._add()
        self._dispatch()

    def publish(self, model: Decoder, version: int) -> float:
        """Make `model`'s weights `version` for the workers. -> seconds the copy took."""
        start = time.perf_counter()
        self.store.publish(model, version)
        seconds = time.perf_counter() - start
        self._dispatch()
        return seconds

    def next_batch(self, stop: Any) -> RolloutBatch | None:
        """The next batch, in order; None if `stop` was set while waiting."""
        self._dispatch()
        while not self._complete(self._next):
            done: GroupDone | None = self._wait(self.groups, "rollout worker", stop)
            if done is None:
                return None
            self._file(done)
            self._dispatch()  # the groups re-drawn for ones without signal (buffer.dynamic_sampling)
        batch = self._assemble(self._next)
        self.scheduler.consumed(self._next)
        self._next += 1
        now = time.perf_counter()
        if self._handed is not None and not self._deterministic:  # the rate the trainer takes groups at
            self.scheduler.measured_group_rate(self.scheduler.groups_per_batch / max(now - self._handed, 1e-6))
        self._handed = now
        self._dispatch()
        return batch

    def evaluate(self, label: str) -> EvalResult:
        """Greedy held-out evaluation of the version published last, on one replica."""
        if self._heldout is None:
            self._heldout = self.scheduler.pool.heldout()
        asked = ""
        while True:
            if asked not in self.replicas.live:  # at first, or the replica asked was lost
                asked = next(iter(self.replicas.live))
                self.replicas.send(asked, EvalRequest(label, self.store.version, self._heldout))
                self._handed = None  # the time until the next batch is the evaluation's, not the trainer's
            result = self._wait(self._replies, f"rollout worker (evaluation {label})")
            if result is not None:
                return result

    def report(self) -> dict[str, Any]:
        """Where the replicas ran, the groups each sent, which were lost and why, and what that moved."""
        return {"nodes": {r.name: r.node for r in self.replicas.all},
                "groups": {r.name: self.filed[r.name] for r in self.replicas.all}, "lost": dict(self.replicas.lost),
                "requeued_groups": self.requeued, "superseded_groups": self.superseded}

    def close(self) -> None:
        self.replicas.close()

    def __enter__(self) -> "RolloutService":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- replicas ------------------------------------------------------------------------------------------
    def add_replica(self) -> str:
        """Start one more replica while running; the scheduler places groups on it from the next
        admission on (it loads the weights published last first). -> its name."""
        name = self._add()
        self._dispatch()
        return name

    def _grow(self) -> None:
        """Below `max_replicas`, start one more replica when the runtime has room for it (looked
        at every GROW_CHECK_S, between batches). It takes groups once it runs (`_place`); until
        then nothing waits on it."""
        now = time.monotonic()
        for replica in list(self.replicas.placing.values()):
            self._place(replica, now)
        replicas = len(self.replicas.live) + len(self.replicas.placing)
        if replicas >= self.max_replicas or now - self._looked_for_room < GROW_CHECK_S:
            return
        self._looked_for_room = now
        if self.replicas.has_room():
            self._place(self.replicas.start(placing=True), now)

    def _place(self, replica: Replica, now: float) -> None:
        """Register a replica started for room once it runs; give it up if it died on the way or
        was not placed within GROW_PLACE_S (Ray's view of free resources lags by about a second)."""
        try:
            placed = self.replicas.place(replica)
        except WorkerFailed as e:
            self.replicas.drop(replica, wait=0)
            print(f"[tempering] warning: rollout replica {replica.name} died before it ran ({e})",
                  file=sys.stderr, flush=True)
            return
        if placed:
            self._register(replica)
            print(f"[tempering] rollout replica {replica.name} started: the cluster had room for it "
                  f"({len(self.replicas.live)} of at most {self.max_replicas} replicas)", file=sys.stderr, flush=True)
        elif now - replica.spawned > GROW_PLACE_S:
            self.replicas.drop(replica, wait=0)  # its target never began: nothing to wait for
            print(f"[tempering] warning: rollout replica {replica.name} was not placed within {GROW_PLACE_S:g} s; "
                  f"given up (another starts while the cluster has room)", file=sys.stderr, flush=True)

    def _add(self) -> str:
        return self._register(self.replicas.start())

    def _register(self, replica: Replica) -> str:
        """Place groups on a started replica (and, with code domains, jobs on its sandbox)."""
        moved = self.scheduler.add_replica(replica.name)
        if self._sandbox_slots:
            self.scheduler.add_node(replica.name, self._sandbox_slots)
        for order in moved:
            self._send(order)
        return replica.name

    def _wait(self, queue: Any, component: str, stop: Any = None) -> Any:
        """The next item of `queue`; a replica lost meanwhile is dropped and the wait goes on."""
        while True:
            try:
                return queue.get(self.timeout, component, self.replicas.workers(), stop)
            except WorkerFailed as e:
                self._lose(e)
                if queue is self._replies:
                    return None  # the caller asks again if the evaluating replica was the one lost

    def _lose(self, error: WorkerFailed) -> None:
        replica = self.replicas.lose(error)  # raises unless its worker died
        if replica.name in self.scheduler.nodes:
            self.scheduler.remove_node(replica.name)
        held = [o for o in self.scheduler.inflight.values() if o.replica == replica.name]
        if not self.replicas.live:
            why = str(error).removeprefix(f"worker {error.worker}: ")
            raise WorkerFailed(error.worker, f"{why}; no rollout replica is left to run the {len(held)} groups it held",
                               error.traceback, died=True) from error
        moved = self.scheduler.remove_replica(replica.name)
        self.requeued += len(moved)
        for order in moved:
            self._open[order.batch].requeued += 1
            self._send(order)
        print(f"[tempering] warning: rollout replica {replica.name} lost ({error}); its {len(moved)} groups in "
              f"flight go to {', '.join(self.replicas.live)}", file=sys.stderr, flush=True)

    # -- internals -----------------------------------------------------------------------------------------
    def _dispatch(self) -> None:
        """Send what the scheduler admits now, and each node's policy when it changed."""
        self._grow()
        orders = self.scheduler.admit(self.store.version)
        if self.scheduler.nodes:
            policy = self.scheduler.node_policy()
            for r in self.replicas.live.values():
                if policy != r.policy:
                    self.replicas.send(r.name, policy)
                    r.policy = policy
        for order in orders:
            self._send(order)

    def _send(self, order: GroupOrder) -> None:
        placed = self.scheduler.inflight.get(order.id)
        if placed is None or placed.replica != order.replica or order.replica not in self.replicas.live:
            return  # re-placed since (its replica was lost): the order as placed now is sent instead
        self._open.setdefault(order.batch, _Open(time.perf_counter()))
        self.replicas.send(order.replica, order)

    def _file(self, done: GroupDone) -> None:
        name = done.order.replica
        if done.startup_s is not None:
            self._startup = max(self._startup or 0.0, done.startup_s)
            if name in self.replicas.live:
                self.replicas.live[name].node = self.replicas.live[name].worker.started(self.timeout)
        self._seconds[name] = done.runner_seconds
        self._sync[name] = done.sync
        placed = self.scheduler.inflight.get(done.order.id)
        if placed is None or placed.replica != name:
            self.superseded += 1  # sent just before its replica was lost; the group runs again elsewhere
            return
        if not self._deterministic:
            self._accept(done)
            return
        held = self._held[done.order.batch]
        held.append(done)
        if len(held) == self.scheduler.groups_per_batch:
            for d in sorted(self._held.pop(done.order.batch), key=lambda d: d.order.id):
                self._accept(d)

    def _accept(self, done: GroupDone) -> None:
        """A finished group into its batch, reported to the scheduler."""
        name = done.order.replica
        self.scheduler.complete(done.report)
        batch = self._open[done.order.batch]
        batch.groups.append((done.order.id, done.group, done.version))
        batch.tokens[name] += sum(t.num_model_tokens for t in done.group.trajectories)
        batch.by_replica[name] += 1
        self.filed[name] += 1
        if done.node is not None:
            for domain, waits in done.node.waits.items():
                batch.waits[domain] += waits
            batch.queued.append(done.node.queued)

    def _complete(self, b: int) -> bool:
        return b in self._open and self.scheduler.is_complete(b)

    def _assemble(self, b: int) -> RolloutBatch:
        batch = self._open.pop(b)
        batch.groups.sort(key=lambda x: x[0])
        groups = [g for _, g, _ in batch.groups]
        split: dict[str, float] = {}
        for name, seconds in self._seconds.items():
            before = self._reported.get(name, {})
            for k, v in seconds.items():
                split[k] = split.get(k, 0.0) + v - before.get(k, 0.0)
            generate = seconds.get("generate", 0.0) - before.get("generate", 0.0)
            if generate > 0 and not self._deterministic:
                self.scheduler.measured(name, batch.tokens[name] / generate)
        self._reported = dict(self._seconds)
        sync = _total([s.minus(self._sync_reported.get(n, SyncStats())) for n, s in self._sync.items()])
        self._sync_reported = dict(self._sync)
        startup, self._startup = self._startup, None
        tokens = sum(t.num_model_tokens for g in groups for t in g.trajectories)
        return RolloutBatch(b, min(v for _, _, v in batch.groups), groups, tokens,
                            time.perf_counter() - batch.dispatched, self.scheduler.metrics(),
                            _node_record(batch) if batch.queued else {}, startup, split,
                            self.scheduler.refilled(b), sync=sync, sync_total=_total(list(self._sync.values())),
                            engine_busy_s=sum(s.get("generate", 0.0) for s in self._seconds.values()),
                            requeued=batch.requeued, replicas=dict(sorted(batch.by_replica.items())))


def _total(stats: list[SyncStats]) -> SyncStats:
    return SyncStats(*(sum(getattr(s, f.name) for s in stats) for f in fields(SyncStats)))


def _node_record(batch: _Open) -> dict[str, Any]:
    waits = sorted(w for ws in batch.waits.values() for w in ws)
    pick = (lambda q: waits[min(len(waits) - 1, int(q * len(waits)))]) if waits else (lambda q: 0.0)
    return {"queued": max(batch.queued), "jobs": len(waits), "wait_p50": pick(0.5), "wait_p99": pick(0.99),
            "wait": {d: sum(ws) / len(ws) for d, ws in batch.waits.items() if ws}}
