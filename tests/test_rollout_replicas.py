"""Engine replicas behind the global scheduler, on the local runtime: groups spread over every
replica, and a replica whose worker dies mid-run is dropped, its groups in flight re-placed on
the other, every batch still complete."""

from __future__ import annotations

import os
import signal
import time

import pytest

from tempering.config import load_config
from tempering.rollout import RolloutService
from tempering.runtime import LocalRuntime, WorkerFailed
from tempering.train import prepare, rollout_spec

TEXT_ONLY = ["--tasks.weights={ sorting = 1.0, strings = 1.0 }", "--model.hidden_size=32",
             "--model.intermediate_size=64", "--model.num_hidden_layers=2", "--model.num_attention_heads=2",
             "--model.num_key_value_heads=1", "--run.threads=1", "--tasks.eval_per_domain=4",
             "--tasks.sft_per_domain=16", "--rollout.tasks_per_step=6", "--rollout.samples_per_task=2",
             "--metrics.progress=false", "--run.stall_timeout_s=120"]


@pytest.fixture
def run(tmp_path):
    cfg = load_config("configs/demo.toml", [*TEXT_ONLY, f"--run.dir={tmp_path}", "--run.steps=6"])
    return prepare(cfg, False, time.monotonic())


def _replicas_of(service, batch):
    return {o.replica for o in service.scheduler.placement.inflight.values() if o.batch == batch}


def test_groups_spread_over_every_replica_and_all_come_back(run):
    with RolloutService(rollout_spec(run), run.model, 0, run.scheduler, LocalRuntime(), replicas=2) as service:
        assert set(service.replicas.live) == {"rollout-0", "rollout-1"}
        assert set(run.scheduler.placement.replicas) == {"rollout-0", "rollout-1"}
        placed = _replicas_of(service, 0)
        assert placed == {"rollout-0", "rollout-1"}  # the least-loaded replica takes each next group
        batch = service.next_batch(None)
        assert batch.index == 0 and len(batch.groups) == 6
        assert service.evaluate("baseline").accuracy >= 0.0
        nodes = service.report()["nodes"]
    assert nodes == {"rollout-0": "local", "rollout-1": "local"}  # both sent groups back


def test_a_replica_that_dies_mid_run_hands_its_groups_to_the_other(run):
    with RolloutService(rollout_spec(run), run.model, 0, run.scheduler, LocalRuntime(), replicas=2) as service:
        batches = [service.next_batch(None)]
        pid = service.replicas.live["rollout-1"].worker.process.pid
        # frozen only while groups are admitted: a group placed on it then is certain to be
        # unfinished when it is killed. The least-loaded replica takes each next group, so load
        # decides whether it is given one at this admission; if not, it thaws and a batch is taken
        # (never taken while frozen: that batch could wait on a group it holds)
        version, held = 0, []
        while not held and version < 4:
            os.kill(pid, signal.SIGSTOP)
            before = set(run.scheduler.placement.inflight)
            version += 1
            service.publish(run.model, version)  # admits the next groups
            placed = {o.id for o in run.scheduler.placement.inflight.values() if o.replica == "rollout-1"}
            held = sorted(placed - before)
            if not held:
                os.kill(pid, signal.SIGCONT)
                batches.append(service.next_batch(None))
        assert held, "the frozen replica was given no group"
        # a local worker killed while sending leaves its queue's write lock held (CPython's
        # multiprocessing.Queue): take it as such a kill would, so that a queue the two
        # replicas shared would leave rollout-0 unable to send a group back. (The acquire fails
        # when the replica was frozen mid-send: then it holds the lock itself, the same case.)
        service.replicas.live["rollout-1"].groups._q._wlock.acquire(timeout=1)
        os.kill(pid, signal.SIGKILL)
        for _ in range(2):
            batches.append(service.next_batch(None))
            version += 1
            service.publish(run.model, version)
        report = service.report()
        # the evaluation goes to the replica that is left
        assert service.evaluate("final").accuracy >= 0.0
    assert [b.index for b in batches] == list(range(len(batches)))
    assert all(len(b.groups) == 6 for b in batches)  # nothing admitted was lost
    assert list(report["lost"]) == ["rollout-1"] and "died with exit code -9" in report["lost"]["rollout-1"]
    # the groups placed on it while frozen ran again elsewhere (one placed before the freeze may
    # have been finished and sent: it is filed, not re-placed)
    assert report["requeued_groups"] >= len(held)
    assert set(run.scheduler.placement.replicas) == {"rollout-0"} and not any(
        o.replica == "rollout-1" for o in run.scheduler.placement.inflight.values())


def test_when_the_last_replica_dies_the_run_fails_naming_it(run):
    with RolloutService(rollout_spec(run), run.model, 0, run.scheduler, LocalRuntime(), replicas=1) as service:
        service.next_batch(None)
        os.kill(service.replicas.live["rollout-0"].worker.process.pid, signal.SIGKILL)
        service.publish(run.model, 1)
        with pytest.raises(WorkerFailed, match=r"worker rollout-0: died with exit code -9; no rollout replica is "
                                               r"left to run the \d+ groups it held"):
            for _ in range(3):
                service.next_batch(None)


def test_a_replica_added_while_running_takes_groups_from_the_next_admission(run):
    with RolloutService(rollout_spec(run), run.model, 0, run.scheduler, LocalRuntime(), replicas=1) as service:
        batches = [service.next_batch(None)]
        assert service.add_replica() == "rollout-1"
        assert set(run.scheduler.placement.replicas) == {"rollout-0", "rollout-1"}
        # batch 2 may have been admitted before the replica came; batch 3 is admitted after it
        placed = set()
        for version in (1, 2, 3):
            service.publish(run.model, version)
            placed |= {o.replica for o in run.scheduler.placement.inflight.values() if o.batch >= 2}
            batches.append(service.next_batch(None))
        assert placed == {"rollout-0", "rollout-1"}
        nodes = service.report()["nodes"]
    assert [len(b.groups) for b in batches] == [6, 6, 6, 6]
    assert nodes == {"rollout-0": "local", "rollout-1": "local"}  # the new replica sent groups back


def test_below_max_replicas_one_more_starts_when_the_runtime_has_room(run, monkeypatch):
    """runtime.max_replicas: nothing starts while the runtime has no room; once it has, one more
    replica starts between batches and takes groups, and never more than the maximum."""
    import tempering.rollout.service as service_module

    monkeypatch.setattr(service_module, "GROW_CHECK_S", 0.0)
    runtime, room = LocalRuntime(), [False]
    runtime.has_room = lambda resources=None: room[0]
    with RolloutService(rollout_spec(run), run.model, 0, run.scheduler, runtime, replicas=1,
                        max_replicas=2) as service:
        batches = [service.next_batch(None)]
        assert set(service.replicas.live) == {"rollout-0"}
        room[0] = True  # a node joined
        placed = set()
        for version in (1, 2, 3):
            service.publish(run.model, version)
            placed |= {o.replica for o in run.scheduler.placement.inflight.values() if o.batch >= 2}
            batches.append(service.next_batch(None))
        assert set(service.replicas.live) == {"rollout-0", "rollout-1"}  # room left, but at the maximum
        assert placed == {"rollout-0", "rollout-1"}
    assert [len(b.groups) for b in batches] == [6, 6, 6, 6]


def _unplaced_until(runtime, placed):
    """`runtime` whose workers spawned from now on report themselves placed only once `placed[0]`
    is true (as a Ray actor waits for a node's new worker process)."""
    spawn = runtime.spawn

    def spawned(*args, **kwargs):
        worker = spawn(*args, **kwargs)
        worker.placed = lambda: placed[0]
        return worker

    runtime.spawn = spawned
    return runtime


def test_a_replica_started_for_room_takes_groups_only_once_it_runs_and_nothing_waits_on_it(run, monkeypatch):
    import tempering.rollout.service as service_module

    monkeypatch.setattr(service_module, "GROW_CHECK_S", 0.0)
    runtime, placed, room = LocalRuntime(), [False], [False]
    runtime.has_room = lambda resources=None: room[0]
    with RolloutService(rollout_spec(run), run.model, 0, run.scheduler, runtime, replicas=1,
                        max_replicas=2) as service:
        _unplaced_until(runtime, placed)
        room[0] = True
        batches = []
        for version in (1, 2):  # batches come from rollout-0 while rollout-1 is not placed
            batches.append(service.next_batch(None))
            service.publish(run.model, version)
        assert set(service.replicas.placing) == {"rollout-1"} and set(service.replicas.live) == {"rollout-0"}
        assert set(run.scheduler.placement.replicas) == {"rollout-0"}  # no group is placed on it meanwhile
        placed[0] = True  # its process is up
        taken = set()
        for version in (3, 4):
            batches.append(service.next_batch(None))
            service.publish(run.model, version)
            taken |= {o.replica for o in run.scheduler.placement.inflight.values()}
        assert set(service.replicas.live) == {"rollout-0", "rollout-1"} and not service.replicas.placing
        assert taken == {"rollout-0", "rollout-1"}
    assert [len(b.groups) for b in batches] == [6, 6, 6, 6]


def test_a_replica_never_placed_is_given_up_without_a_wait_and_another_is_tried(run, monkeypatch):
    import tempering.rollout.service as service_module

    monkeypatch.setattr(service_module, "GROW_CHECK_S", 0.0)
    monkeypatch.setattr(service_module, "GROW_PLACE_S", 0.0)
    runtime, room = LocalRuntime(), [False]
    runtime.has_room = lambda resources=None: room[0]
    with RolloutService(rollout_spec(run), run.model, 0, run.scheduler, runtime, replicas=1,
                        max_replicas=2) as service:
        _unplaced_until(runtime, [False])
        room[0] = True
        batches = [service.next_batch(None)]
        service.publish(run.model, 1)
        batches.append(service.next_batch(None))
        given_up = [r for r in service.replicas.all if r.name not in service.replicas.placing][1:]
        # killed at once (its target had not begun), not given the stall deadline to end
        assert given_up and all(r.worker.process.exitcode == -signal.SIGKILL for r in given_up)
        assert set(service.replicas.live) == {"rollout-0"} and len(service.replicas.placing) <= 1
        assert service.report()["nodes"]["rollout-1"] == ""  # never ran
    assert [len(b.groups) for b in batches] == [6, 6]


def test_a_replica_the_elastic_policy_removes_drains_its_groups_and_leaves(run):
    """A trainer that works a second between batches while two replicas take a fraction of that
    to make one: the policy (patience 1) drains one; it finishes the groups it was sent, which
    join their batches, and its worker returns on its own (exit code 0, not killed). Every batch
    is whole, each group filed once, none re-placed."""
    from tempering.runtime.elastic import ElasticPolicy

    policy = ElasticPolicy(1, 2, up_wait=0.9, down_idle=0.3, patience=1, cooldown=0)
    with RolloutService(rollout_spec(run), run.model, 0, run.scheduler, LocalRuntime(), replicas=2,
                        elastic=policy) as service:
        workers = {name: r.worker for name, r in service.replicas.live.items()}
        batches = [service.next_batch(None)]
        drained = None
        for version in range(1, 6):
            service.publish(run.model, version)
            time.sleep(1.0)  # the trainer's step
            batches.append(service.next_batch(None))
            if drained is None and service.replicas.draining:
                [drained] = service.replicas.draining
        report = service.report()
        assert service.evaluate("final").accuracy >= 0.0  # on the replica that stayed
    assert drained is not None, [b.elastic for b in batches]
    assert [d["action"] for d in report["elastic"]] == ["remove"]
    assert report["elastic"][0]["reason"] == "trainer_bottleneck"
    assert drained not in service.replicas.live and workers[drained].process.exitcode == 0
    assert [len(b.groups) for b in batches] == [6] * 6
    assert sum(report["groups"].values()) == 36 and report["groups"][drained] > 0
    assert report["requeued_groups"] == report["superseded_groups"] == 0
    assert batches[0].elastic is None and all(b.elastic is not None for b in batches[1:])
