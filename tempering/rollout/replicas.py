"""`Replicas`: the rollout workers of a run as the trainer's side sees them. Each is an engine
replica on the runtime (a worker with its own queue of orders); this module spawns them with
the weight sync the runtime allows and queues of its own back to the trainer (`Inbox`), and tells
a lost worker from a failed one.

Weights: on the local runtime one `WeightStore` in shared memory serves every replica; on a
remote runtime (Ray) each replica gets a channel of `BlobPublisher`, which waits for no replica,
so a replica that dies never holds up a publish (a broadcast group would fail as a whole). A
`WeightSync` given in their place (a sharded trainer's files) serves every replica its source. A
worker whose process or node went away (`WorkerFailed.died`) is lost: `lose` forgets it and the
caller re-places its groups. A worker that raised is a failure of the run, never retried
elsewhere (the same input would fail again). A replica started for room the runtime says it
has may take a while to be placed (on Ray: a node's new worker process); it waits in `placing`,
apart from the live ones, and `place` moves it over once it runs, so that nobody waits on it. It
orders and files nothing (`service`).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import Mapping

from tempering.evaluation import EvalResult
from tempering.models import Decoder
from tempering.rollout.inbox import Inbox
from tempering.rollout.worker import GroupDone, RolloutSpec, WorkerMessage, run_rollout_worker
from tempering.runtime import Queue, Resources, Runtime, WorkerFailed, WorkerHandle
from tempering.scheduler.orders import NodePolicy
from tempering.weights import BlobPublisher, WeightPublisher, WeightSource, WeightStore

CHECK_REMOTE_S = 0.02  # a remote worker's looks at its stop event and orders while busy (each ~1 ms)


@dataclass(frozen=True)
class WeightSync:
    """A weight sync made elsewhere: the trainer's side, and what every replica reads (picklable)."""

    publisher: WeightPublisher
    source: WeightSource


@dataclass
class Replica:
    name: str
    worker: WorkerHandle
    orders: Queue[WorkerMessage]
    groups: Queue[GroupDone]  # the queue it sends scored groups into (read by `Replicas.groups`)
    policy: NodePolicy | None = None  # the node policy sent to it last
    node: str = ""  # where it runs ("local" on the local runtime), once placed or once it has sent a group
    spawned: float = field(default_factory=time.monotonic)


class Replicas:
    def __init__(self, runtime: Runtime, spec: RolloutSpec, model: Decoder, version: int, room: int,
                 resources: Mapping[str, float] | None = None, weights: WeightSync | None = None):
        self.runtime, self.room = runtime, room
        # each replica sends into queues of its own (see `inbox`); the trainer reads them here
        self.groups: Inbox[GroupDone] = Inbox("scored groups")
        self.replies: Inbox[EvalResult] = Inbox("evaluations")
        self.spec = dataclasses.replace(spec, check_every_s=CHECK_REMOTE_S if runtime.remote else 0.0)
        self.timeout = spec.stall_timeout_s
        # the sync given (the trainer group's per-shard files), or the runtime's
        self.weights: BlobPublisher | WeightStore | WeightPublisher = (
            weights.publisher if weights is not None else
            BlobPublisher(runtime, self.timeout) if runtime.remote else WeightStore(model, runtime.ctx))
        self.source = weights.source if weights is not None else None
        self.weights.publish(model, version)
        self.stop = runtime.event("rollout stop")
        self.resources = Resources(custom=dict(resources)) if resources else None
        self.live: dict[str, Replica] = {}
        self.placing: dict[str, Replica] = {}  # started, not yet running: no orders, not among `workers()`
        self.lost: dict[str, str] = {}  # name -> why
        self.draining: set[str] = set()  # live ones told to `Leave`: they take no new group (`scaling`)
        self.all: list[Replica] = []

    def start(self, placing: bool = False) -> Replica:
        """Spawn the next replica, `rollout-<i>`: live at once, or with `placing`, held apart
        until `place` finds it running."""
        i = len(self.all)
        name = f"rollout-{i}"
        orders: Queue[WorkerMessage] = self.runtime.queue(0, f"orders for {name}")
        groups: Queue[GroupDone] = self.runtime.queue(self.room, f"scored groups of {name}")
        replies: Queue[EvalResult] = self.runtime.queue(1, f"evaluations of {name}")
        weights = (self.weights.channel(name) if isinstance(self.weights, BlobPublisher) else
                   self.source if self.source is not None else self.weights)
        worker = self.runtime.spawn(name, run_rollout_worker, self.spec, weights, groups, orders, replies,
                                    self.stop, i, resources=self.resources)
        self.groups.add(name, groups)
        self.replies.add(name, replies)
        replica = Replica(name, worker, orders, groups)
        (self.placing if placing else self.live)[name] = replica
        self.all.append(replica)
        return replica

    def place(self, replica: Replica) -> bool:
        """Whether a placing replica runs now; if so it joins the live ones. Never waits; raises
        `WorkerFailed` if it died on the way (its node went away)."""
        if not replica.worker.placed():
            return False
        replica.node = replica.worker.started(self.timeout)  # answers at once once placed
        del self.placing[replica.name]
        self.live[replica.name] = replica
        return True

    def has_room(self) -> bool:
        """Whether the runtime would place one more replica now."""
        return self.runtime.has_room(self.resources)

    def taking(self) -> list[str]:
        """The live replicas that take new groups (none draining)."""
        return [name for name in self.live if name not in self.draining]

    def workers(self) -> list[WorkerHandle]:
        return [r.worker for r in self.live.values()]

    def send(self, name: str, item: WorkerMessage) -> None:
        self.live[name].orders.put(item, self.timeout, f"rollout replica {name}'s orders")

    def lose(self, error: WorkerFailed) -> Replica:
        """Forget the replica whose worker died. `error` itself is raised again when its worker
        raised (or is none of these): that is the run's failure, not a lost replica."""
        if not error.died or error.worker not in self.live:
            raise error
        replica = self.live[error.worker]
        self.lost[replica.name] = str(error)
        self.drop(replica)
        return replica

    def drop(self, replica: Replica, wait: float | None = None) -> None:
        """Stop and forget a replica: its queues, its weight channel, its worker (given `wait`
        seconds, the stall deadline by default, to end before it is killed)."""
        if self.live.pop(replica.name, None) is None:
            del self.placing[replica.name]
        self.draining.discard(replica.name)
        self.groups.remove(replica.name)
        self.replies.remove(replica.name)
        if isinstance(self.weights, BlobPublisher):
            self.weights.drop(replica.name)
        # on Ray: its actor and resources go back
        replica.worker.join(timeout=self.timeout if wait is None else wait)

    def close(self) -> None:
        self.stop.set()
        for r in self.live.values():
            r.worker.join(timeout=10)
        for r in self.placing.values():
            r.worker.join(timeout=0)  # its target has not begun: nothing to end cleanly
        # orders no worker will read must not hold this process's exit (a local queue's feeder
        # thread waits for room in its pipe)
        for r in self.all:
            r.orders.drain()
        self.groups.close()
        self.replies.close()
