"""`RolloutService`: the trainer's handle on its rollout workers, a thin driver of the scheduler.

It starts `replicas` workers on the runtime it is given (local processes or Ray actors),
registers each with the scheduler as an engine replica (and a sandbox node when a domain runs
code), sends each the orders the scheduler admits and places, and hands the scored groups that
come back through one `Inbox` to the `BatchAssembler`; `next_batch` returns batches in order
once admission says they are complete. It feeds the measured throughputs back, asks one replica
for held-out evaluations, and puts every wait under the run's stall deadline. A replica whose
worker died is lost: placement hands back its orders to send again (a result it sent for them is
set aside); with none left the run fails. Below the target of `scaling` (`max_replicas`, or the
elastic policy's count) it starts one more replica whenever the runtime has room; each batch the
trainer takes is an observation for the elastic policy, and a replica it removes drains
(`scaling`). The in-flight orders are placement's alone."""

from __future__ import annotations

import sys
import time
from collections import Counter, defaultdict
from typing import Mapping, TypeVar

from tempering.evaluation import EvalResult
from tempering.models import Decoder
from tempering.rollout.assembler import BatchAssembler, RolloutBatch
from tempering.rollout.replicas import Replica, Replicas, WeightSync
from tempering.rollout.scaling import Scaling
from tempering.rollout.worker import EvalRequest, GroupDone, RolloutSpec
from tempering.runtime import Queue, Runtime, StopSignal, WorkerFailed
from tempering.runtime.elastic import ElasticPolicy
from tempering.scheduler.global_ import GlobalScheduler
from tempering.scheduler.orders import GroupOrder

GROW_CHECK_S = 1.0  # below runtime.max_replicas: how often to ask the runtime for room (a call to Ray)
# how long a replica started for room may wait to be placed before it is given up (nothing waits
# on it meanwhile; on Ray, a new node's first worker process can take a minute on a busy machine)
GROW_PLACE_S = 120.0
T = TypeVar("T")


class RolloutService:
    def __init__(self, spec: RolloutSpec, model: Decoder, version: int, scheduler: GlobalScheduler, runtime: Runtime,
                 replicas: int = 1, resources: Mapping[str, float] | None = None, max_replicas: int = 0,
                 elastic: ElasticPolicy | None = None, weights: WeightSync | None = None):
        self.timeout = spec.stall_timeout_s
        self.scheduler = scheduler
        self.admission, self.placement = scheduler.admission, scheduler.placement
        # room for every group admission lets run at once, so a worker never waits to hand one back
        a = self.admission
        room = (a.groups_per_batch + a.refills) * (a.max_staleness + a.queue_size + 2)
        self.replicas = Replicas(runtime, spec, model, version, room, resources, weights)
        self.groups, self._replies = self.replicas.groups, self.replicas.replies
        self.store = self.replicas.weights
        self._sandbox_slots = spec.sandbox.workers if spec.needs_sandbox else 0
        self.assembler = BatchAssembler()
        self._next = a.next_batch
        self._heldout = None
        self._handed: float | None = None  # when the last batch went to the trainer
        self.requeued = self.superseded = 0
        self.filed: Counter = Counter()  # replica -> groups it sent that went into a batch
        # without a policy: up to max_replicas (0: none started beyond, or in place of, the first
        # `replicas`); with one: the count it wants, from `replicas` on
        self.scaling = Scaling(self.replicas, scheduler, replicas if elastic else max_replicas, elastic)
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

    def next_batch(self, stop: StopSignal) -> RolloutBatch | None:
        """The next batch, in order; None if `stop` was set while waiting."""
        asked = time.perf_counter()
        self._dispatch()
        while not self._complete(self._next):
            done: GroupDone | None = self._wait(self.groups, "rollout worker", stop)
            if done is None:
                return None
            self._file(done)
            self._dispatch()  # the groups re-drawn for ones without signal (buffer.dynamic_sampling)
        if not self._deterministic:  # no wall-clock measurement steers a deterministic run
            for name, tokens_per_s in self.assembler.throughputs(self._next).items():
                self.scheduler.measured(name, tokens_per_s)
        batch = self.assembler.assemble(self._next, self.scheduler.metrics(), self.admission.refilled(self._next))
        self.admission.consumed(self._next)
        self._next += 1
        now = time.perf_counter()
        if self._handed is not None and not self._deterministic:  # the rate the trainer takes groups at
            self.scheduler.mix.measured_group_rate(self.admission.groups_per_batch / max(now - self._handed, 1e-6))
            # the trainer's cycle: it waited from `asked` on, and worked from the previous batch to then
            batch.elastic = self.scaling.observe(batch.index, now - asked, asked - self._handed,
                                                 batch.runner_seconds.get("generate", 0.0))
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
                asked = self.replicas.taking()[0]  # not one draining: it takes no new work
                self.replicas.send(asked, EvalRequest(label, self.store.version, self._heldout))
                self._handed = None  # the time until the next batch is the evaluation's, not the trainer's
            result = self._wait(self._replies, f"rollout worker (evaluation {label})")
            if result is not None:
                return result

    def report(self) -> dict[str, object]:
        """Where the replicas ran, the groups each sent, which were lost and why, and what that moved."""
        return {"nodes": {r.name: r.node for r in self.replicas.all},
                "groups": {r.name: self.filed[r.name] for r in self.replicas.all}, "lost": dict(self.replicas.lost),
                "requeued_groups": self.requeued, "superseded_groups": self.superseded,
                "admitted_groups": self.scheduler.ordered,
                **({"elastic": self.scaling.decisions, "drained": self.scaling.left}
                   if self.scaling.policy is not None else {})}

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
        """Below the target count (`scaling`), start one more replica when the runtime has room
        for it (looked at every GROW_CHECK_S, between batches). It takes groups once it runs
        (`_place`); until then nothing waits on it. Drained replicas that left are dropped."""
        for name in self.scaling.settle():
            print(f"[tempering] rollout replica {name} drained and left ({len(self.replicas.taking())} take groups)",
                  file=sys.stderr, flush=True)
        now = time.monotonic()
        for replica in list(self.replicas.placing.values()):
            self._place(replica, now)
        if self.scaling.wanted() <= 0 or now - self._looked_for_room < GROW_CHECK_S:
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
                  f"({len(self.replicas.taking())} of {self.scaling.target} wanted)", file=sys.stderr, flush=True)
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

    def _wait(self, queue: Queue[T], component: str, stop: StopSignal | None = None) -> T | None:
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
        if not self.replicas.taking():  # draining ones take no group
            why = str(error).removeprefix(f"worker {error.worker}: ")
            raise WorkerFailed(error.worker, f"{why}; no rollout replica is left to run the "
                               f"{self.placement.held_by(replica.name)} groups it held",
                               error.traceback, died=True) from error
        moved = self.scheduler.lose(replica.name)
        self.requeued += len(moved)
        for order in moved:
            self.assembler.requeued(order.batch)
            self._send(order)
        print(f"[tempering] warning: rollout replica {replica.name} lost ({error}); its {len(moved)} groups in "
              f"flight go to {', '.join(self.replicas.live)}", file=sys.stderr, flush=True)

    # -- internals -----------------------------------------------------------------------------------------
    def _dispatch(self) -> None:
        """Send what the scheduler admits now, and each node's policy when it changed."""
        self._grow()
        orders = self.scheduler.admit(self.store.version)
        if self.placement.nodes:
            policy = self.scheduler.node_policy()
            for r in self.replicas.live.values():
                if policy != r.policy:
                    self.replicas.send(r.name, policy)
                    r.policy = policy
        for order in orders:
            self._send(order)

    def _send(self, order: GroupOrder) -> None:
        if not self.placement.holds(order) or order.replica not in self.replicas.live:
            return  # re-placed since (its replica was lost): the order as placed now is sent instead
        self.assembler.opened(order.batch)
        self.replicas.send(order.replica, order)

    def _file(self, done: GroupDone) -> None:
        name = done.order.replica
        if done.startup_s is not None and name in self.replicas.live:
            self.replicas.live[name].node = self.replicas.live[name].worker.started(self.timeout)
        self.assembler.reported(done)
        if not self.placement.holds(done.order):
            self.superseded += 1  # sent just before its replica was lost; the group runs again elsewhere
            return
        if not self._deterministic:
            self._accept(done)
            return
        held = self._held[done.order.batch]
        held.append(done)
        if len(held) == self.admission.groups_per_batch:
            for d in sorted(self._held.pop(done.order.batch), key=lambda d: d.order.id):
                self._accept(d)

    def _accept(self, done: GroupDone) -> None:
        """A finished group into its batch, reported to the scheduler."""
        self.scheduler.complete(done.report)
        self.assembler.add(done)
        self.filed[done.order.replica] += 1

    def _complete(self, b: int) -> bool:
        return self.assembler.has(b) and self.admission.is_complete(b)
