"""The Ray runtime on a simulated cluster (`ray.cluster_utils.Cluster`: a head and two nodes,
started once for the module): placement by resources and placement groups, groups that cannot
be placed, a trainer rank on another node, a node lost mid-work, a cluster that does not answer."""

from __future__ import annotations

import os
import sys
from types import SimpleNamespace

import pytest

from tempering.runtime import Resources, Stall, WorkerFailed

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'tempering[ray]')")

LONG = 120  # a deadline no passing test reaches


@pytest.fixture(scope="module")
def cluster(start_ray):
    from ray.cluster_utils import Cluster

    from tempering.runtime.ray import RayRuntime

    def make():
        c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
        try:
            nodes = {name: c.add_node(num_cpus=1, resources={name: 1, "slot": 2}) for name in ("node_a", "node_b")}
            c.wait_for_nodes()
            # the workers import this module by name, as they would on one machine
            env = {"env_vars": {"PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}}
            return SimpleNamespace(cluster=c, nodes=nodes, runtime=RayRuntime(c.address, runtime_env=env))
        except BaseException:
            c.shutdown()
            raise

    env = start_ray(make)
    yield env
    env.runtime.close()
    env.cluster.shutdown()


def _report_node(out):
    out.put(ray.get_runtime_context().get_node_id(), LONG, "reporter")


def _heartbeat(out):
    beat = 0
    while True:
        out.put(beat, LONG, "heartbeat")
        beat += 1


def test_workers_land_on_the_node_whose_resources_they_ask_for(cluster):
    rt = cluster.runtime
    for name, node in cluster.nodes.items():
        out = rt.queue(1)
        worker = rt.spawn(f"on {name}", _report_node, out, resources=Resources(cpus=0, custom={name: 1}))
        assert out.get(LONG, "reporter", [worker]) == node.node_id
        assert worker.started(LONG) == node.node_id
        worker.join(LONG)


def test_a_placement_group_reserves_slots_on_every_node(cluster):
    rt = cluster.runtime
    group = rt.placement_group("sandbox-slots", [{"slot": 2}, {"slot": 2}], LONG, strategy="STRICT_SPREAD")
    in_group = [rt.spawn(f"sandbox {i}", _report_node, rt.queue(1),
                         resources=Resources(cpus=0, custom={"slot": 2}, group=group, bundle=i)) for i in range(2)]
    assert {w.started(LONG) for w in in_group} == {n.node_id for n in cluster.nodes.values()}
    # the group holds every slot: a worker outside it is not placed, and says what it waits for
    outside = rt.spawn("outsider", _report_node, rt.queue(1), resources=Resources(cpus=0, custom={"slot": 1}))
    with pytest.raises(Stall, match=r"worker outsider: not placed within 1 s; it asks for \{'CPU': 0, 'slot': 1\}"):
        outside.started(1)
    assert not outside.placed()  # a look that never waits
    with pytest.raises(ValueError, match="fits no bundle of placement group sandbox-slots"):
        rt.spawn("too big", _report_node, None, resources=Resources(cpus=1, group=group, bundle=0))
    for w in in_group:
        w.join(LONG)
    rt.release(group)
    assert outside.started(LONG) in {n.node_id for n in cluster.nodes.values()}  # the slots came back
    assert outside.placed()
    outside.join(LONG)


def test_a_placement_group_that_cannot_be_placed_says_what_is_missing(cluster):
    rt = cluster.runtime
    with pytest.raises(Stall, match=r"placement group too-many \(SPREAD, .*\) not ready within 1 s: "
                                    r"slot 6 asked, the cluster has 4 \(4 free\)"):
        rt.placement_group("too-many", [{"slot": 2}] * 3, 1, strategy="SPREAD")
    with pytest.raises(Stall, match=r"placement group too-large .* bundle 0 \{'slot': 3\} fits no node"):
        rt.placement_group("too-large", [{"slot": 3.0}], 1)
    pending = [g for g in ray.util.placement_group_table().values() if g["state"] == "PENDING"]
    assert pending == []  # removed when they failed, so they never take slots later


def test_a_trainer_rank_on_another_node_trains_as_the_single_process_trainer(cluster):
    """`TrainerGroup` over the Ray runtime: rank 1 an actor on node_a (its weights and optimizer
    state through the object store), meeting rank 0 here at `runtime.host`."""
    import copy

    import torch

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), "trainer"))
    from test_fsdp import ALGO, ARCH, BATCHES, CFG  # the FSDP tests' model, settings and batches

    from tempering.models import build_model
    from tempering.trainer import Trainer
    from tempering.trainer.group import TrainerGroup

    oracle_model = build_model(ARCH, seed=0)
    oracle = Trainer(oracle_model, CFG, ALGO, total_steps=10)
    oracle.rl_step(BATCHES[0])  # the group starts from a trained state: the optimizer's crosses too
    model = copy.deepcopy(oracle_model)
    started = Trainer(model, CFG, ALGO, total_steps=10)
    started.load_state_dict(copy.deepcopy(oracle.state_dict()))
    group = TrainerGroup(model, started, 2, threads=1, timeout_s=LONG, runtime=cluster.runtime,
                         resources=Resources(cpus=1, custom={"node_a": 1}))
    try:
        assert group.nodes == {"trainer-rank-1": cluster.nodes["node_a"].node_id}
        for batch in BATCHES[1:]:
            want, got = oracle.rl_step(batch), group.rl_step(batch)
            assert got.loss == pytest.approx(want.loss, abs=1e-6)
            for (name, x), y in zip(oracle_model.state_dict().items(), model.state_dict().values(), strict=True):
                torch.testing.assert_close(y, x, atol=2e-6, rtol=1e-5, msg=name)
    finally:
        group.close()


def test_a_trainer_rank_no_node_can_take_stalls_by_name_and_what_it_asks(cluster):
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), "trainer"))
    from test_fsdp import ALGO, ARCH, CFG

    from tempering.models import build_model
    from tempering.trainer import Trainer
    from tempering.trainer.group import TrainerGroup

    model = build_model(ARCH, seed=0)
    ask = Resources(cpus=1, custom={"trainer": 1})  # no node offers "trainer"
    with pytest.raises(Stall, match=r"worker trainer-rank-1: not placed within 2 s; it asks for \{'CPU': 1, "
                                    r"'trainer': 1\}"):
        TrainerGroup(model, Trainer(model, CFG, ALGO), 2, threads=1, timeout_s=2, runtime=cluster.runtime,
                     resources=ask)
    assert cluster.runtime.has_room(Resources(cpus=1, custom={"node_a": 1}))  # its request went back


def test_a_node_lost_mid_work_fails_its_worker_by_name(cluster):
    doomed = cluster.cluster.add_node(num_cpus=1, resources={"node_c": 1})
    cluster.cluster.wait_for_nodes()
    rt = cluster.runtime
    out = rt.queue(1)
    worker = rt.spawn("sampler", _heartbeat, out, resources=Resources(cpus=0, custom={"node_c": 1}))
    assert out.get(LONG, "sampler", [worker]) == 0  # it is working
    cluster.cluster.remove_node(doomed)
    with pytest.raises(WorkerFailed, match="worker sampler: died: .*its node has died") as e:
        # beats already sent come first: at most the one queued and one in flight (each put waits
        # for room), so a worker that went on beating fails this test instead of looping forever
        for _ in range(3):
            out.get(LONG, "sampler", [worker])
    assert e.value.worker == "sampler" and not e.value.bad_input


def test_a_worker_that_cannot_import_its_target_fails_by_name(cluster, tmp_path, monkeypatch):
    """Workers import by the path the runtime started with: a module added later is not there."""
    (tmp_path / "added_later.py").write_text("def run():\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import added_later

    worker = cluster.runtime.spawn("late", added_later.run, resources=Resources(cpus=0))
    with pytest.raises(WorkerFailed, match="worker late: ModuleNotFoundError: No module named 'added_later'") as e:
        cluster.runtime.queue(1).get(LONG, "late", [worker])
    assert "Traceback" in e.value.traceback
    worker.join(LONG)


def test_a_cluster_that_does_not_answer_stalls_by_address(cluster):
    from tempering.config import RuntimeConfig
    from tempering.runtime.factory import open_runtime

    # the deadline is the config's (runtime.connect_timeout_s)
    with pytest.raises(Stall, match="Ray cluster at 127.0.0.1:1: no answer within 0.5 s"):
        open_runtime(RuntimeConfig(kind="ray", address="127.0.0.1:1", connect_timeout_s=0.5))
