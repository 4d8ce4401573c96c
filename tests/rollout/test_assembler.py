"""`BatchAssembler`: a batch's telemetry is the sum of the per-group deltas its workers sent since
the previous batch (set-aside groups included), its groups in order; hand-computed sums."""

from __future__ import annotations

from tempering.pool import TaskDraw
from tempering.records import Group, Task
from tempering.rollout.assembler import BatchAssembler, NodeRecord
from tempering.rollout.worker import GroupDone
from tempering.scheduler.local import NodeStats
from tempering.scheduler.orders import GroupOrder, GroupReport
from tempering.weights import SyncStats


def done(order_id: int, batch: int, replica: str, generate: float, syncs: int = 0, waits=None, startup=None):
    order = GroupOrder(order_id, batch, TaskDraw("arithmetic", None, order_id), replica, 0, 0)
    node = None if waits is None else NodeStats(4, 0, 3, {}, waits, 0.0)
    return GroupDone(order, Group(Task(id=f"t{order_id}", domain="arithmetic", prompt="p"), [], []), 5 + order_id,
                     GroupReport(order_id, 0, 0.0, (), ()), {"generate": generate, "score": 1.0},
                     SyncStats(syncs=syncs, pull_s=0.5 * syncs), node, startup)


def test_a_batch_sums_the_deltas_reported_since_the_previous_one():
    a = BatchAssembler()
    a.opened(0)
    a.opened(1)
    a.reported(d := done(1, 0, "r0", 2.0, syncs=1, waits={"x": [1.0, 3.0]}, startup=4.0))
    a.add(d)
    a.reported(done(9, 1, "r1", 0.5))  # set aside (its replica was lost): its time still counts
    a.reported(d := done(0, 0, "r1", 1.0, syncs=2, waits={"x": [2.0]}, startup=6.0))
    a.add(d)
    batch = a.assemble(0, {}, refilled=0)
    assert [g.task.id for g in batch.groups] == ["t0", "t1"] and batch.version == 5
    assert batch.runner_seconds == {"generate": 3.5, "score": 3.0}
    assert batch.sync == SyncStats(syncs=3, pull_s=1.5) and batch.sync_total == batch.sync
    assert batch.startup_s == 6.0 and batch.engine_busy_s == 3.5 and batch.replicas == {"r0": 1, "r1": 1}
    assert batch.node == NodeRecord(queued=3, jobs=3, wait_p50=2.0, wait_p99=3.0, wait={"x": 2.0})
    a.reported(d := done(2, 1, "r0", 1.0, syncs=1))
    a.add(d)
    later = a.assemble(1, {}, refilled=0)
    assert later.runner_seconds == {"generate": 1.0, "score": 1.0} and later.startup_s is None
    assert later.sync == SyncStats(syncs=1, pull_s=0.5) and later.sync_total == SyncStats(syncs=4, pull_s=2.0)
    assert later.engine_busy_s == 4.5 and later.node is None


def test_throughputs_are_a_replicas_tokens_over_its_engine_seconds():
    a = BatchAssembler()
    a.opened(0)
    a.reported(done(0, 0, "r0", 2.0))
    a.reported(done(1, 0, "r1", 0.0))
    assert a.throughputs(0) == {"r0": 0.0}  # no groups of r0 in the batch yet: 0 tokens; r1 never generated
