"""The demo loop on a simulated Ray cluster (`ray.cluster_utils.Cluster`: a head, two engine
nodes and a trainer node, started once for the module): two engine replicas, one per engine
node, and a second trainer rank on the trainer node train a few steps to a summary; elastic
replicas grow for a trainer that waits and drain for one that is the bottleneck, every admitted
group accounted for; then a node is removed mid-run, another joins and a replica starts there, and the run
finishes, every admitted group accounted for. The trainer runs in this process, as `tempering train --runtime ray` would."""

from __future__ import annotations

import json
import threading
import time
from types import SimpleNamespace

import pytest

from tempering.config import load_config
from tempering.train import train

pytest.importorskip("ray", reason="Ray is not installed (pip install 'tempering[ray]')")

STEPS, TASKS, SAMPLES = 5, 4, 4
# 300 SFT steps: most code answers then end, so programs reach the sandbox on the nodes (at 40,
# about one code answer in sixteen did, and a run could pass none to the sandbox)
TINY = ["--model.hidden_size=32", "--model.intermediate_size=64", "--model.num_hidden_layers=2",
        "--model.num_attention_heads=2", "--model.num_key_value_heads=1", "--run.threads=1",
        "--tasks.eval_per_domain=4", "--tasks.sft_per_domain=32", f"--rollout.tasks_per_step={TASKS}",
        f"--rollout.samples_per_task={SAMPLES}", "--sft.steps=300", "--sft.batch_size=16", "--sandbox.workers=1",
        "--reward.workers=1", "--metrics.progress=false", "--metrics.tensorboard=false", "--metrics.plot=false",
        f"--run.steps={STEPS}", "--run.stall_timeout_s=60", "--runtime.kind=ray", "--runtime.replicas=2",
        "--runtime.replica_resources={ engine = 1 }"]


@pytest.fixture(scope="module")
def cluster(start_ray):
    from ray.cluster_utils import Cluster

    def make():
        # the head offers no CPU: each replica asks for a CPU and an "engine", so one lands on each node
        c = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False})
        try:
            nodes = [c.add_node(num_cpus=1, resources={"engine": 1}) for _ in range(2)]
            trainer = c.add_node(num_cpus=1, resources={"trainer": 1})  # for a second trainer rank
            c.wait_for_nodes()
            return SimpleNamespace(cluster=c, nodes=nodes, trainer=trainer)
        except BaseException:
            c.shutdown()
            raise

    env = start_ray(make)
    yield env
    env.cluster.shutdown()


def _config(tmp_path, cluster, name, *overrides):
    return load_config("configs/demo.toml", [*TINY, f"--run.dir={tmp_path}", f"--run.name={name}",
                                             f"--runtime.address={cluster.cluster.address}", *overrides])


def _fates(run_dir):
    return [json.loads(line)["fate"] for line in (run_dir / "samples.jsonl").read_text().splitlines()]


def test_two_replicas_on_two_nodes_train_the_demo_to_a_summary(tmp_path, cluster):
    """Two engine replicas, one per engine node, and the trainer as two FSDP2 ranks: rank 0 in
    this process, rank 1 an actor on the trainer node."""
    summary = train(_config(tmp_path, cluster, "spread", "--runtime.trainer_ranks=2",
                            "--runtime.trainer_resources={ trainer = 1 }"))
    assert summary["steps"] == STEPS and summary["stopped"] is None
    nodes = summary["replicas"]["nodes"]
    assert sorted(nodes.values()) == sorted(n.node_id for n in cluster.nodes)  # one replica on each node
    assert summary["trainer_ranks"] == {"trainer-rank-1": cluster.trainer.node_id}
    assert summary["replicas"]["lost"] == {} and summary["replicas"]["requeued_groups"] == 0
    assert len(_fates(tmp_path / "spread")) == STEPS * TASKS * SAMPLES  # every sample accounted for
    executions = [json.loads(line) for line in (tmp_path / "spread" / "sandbox.jsonl").read_text().splitlines()]
    assert executions and all(e["backend"] == "bwrap" for e in executions)  # the sandbox runs on the nodes
    rows = [json.loads(line) for line in (tmp_path / "spread" / "metrics.jsonl").read_text().splitlines()]
    assert sum(r["seconds/weight_fetch"] for r in rows) > 0  # the replicas' downloads of each version
    assert all(0 < r["seconds/worker_startup"] < 300 for r in rows if "seconds/worker_startup" in r)


# elastic replicas (runtime.min_replicas): text domains (no sandbox), a short warm-up, the policy
# acting after 2 steps in a row with no cooldown; a run takes every batch it admits (run.steps)
ELASTIC = ["--tasks.weights={ sorting = 1.0, strings = 1.0 }", "--sft.steps=3", "--runtime.min_replicas=1",
           "--runtime.max_replicas=2", "--runtime.scale_patience=2", "--runtime.scale_cooldown=0"]


def _accounted(run_dir, summary, steps, untaken=0):
    """Every admitted group was filed once into a batch the trainer took (but for `untaken`
    batches admitted when the run was stopped), and every sample of those has a fate (trained, or
    dropped with a reason); none re-placed, none set aside."""
    report = summary["replicas"]
    assert summary["steps"] == steps
    assert report["admitted_groups"] == (steps + untaken) * TASKS, report
    assert steps * TASKS <= sum(report["groups"].values()) <= (steps + untaken) * TASKS, report
    assert report["lost"] == {} and report["requeued_groups"] == report["superseded_groups"] == 0
    fates = _fates(run_dir)
    assert len(fates) == steps * TASKS * SAMPLES and set(fates) <= {"trained", "stale", "failed", "uniform", "alone"}
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert sum(r["samples/trained"] + sum(v for k, v in r.items() if k.startswith("samples/dropped_"))
               for r in rows) == len(fates)
    return report, rows


def test_a_trainer_that_waits_for_batches_gets_one_more_replica(tmp_path, cluster, monkeypatch):
    """Synchronous (max_staleness 0): the trainer waits for every batch while one replica makes
    it, so the policy adds a replica; it is placed on the other engine node (its worker process
    may take a while to start) and sends groups. Two steps after it did, the run is asked to stop,
    as a SIGTERM would: every batch it admitted was taken, but for the one admitted at the last
    publish (max_staleness 0), which the stop leaves untaken."""
    import tempering.train as train_module
    from tempering.runtime.stop import StopRequest

    cap, metrics = 200, tmp_path / "grow" / "metrics.jsonl"

    class Stop(StopRequest):  # the test's SIGTERM, once rollout-1's groups were in two steps
        def is_set(self) -> bool:
            if sum("replicas/rollout-1" in r for r in _rows(metrics)) >= 2:
                self.request("SIGTERM")
            return super().is_set()

    monkeypatch.setattr(train_module, "StopRequest", Stop)
    summary = train(_config(tmp_path, cluster, "grow", *ELASTIC, "--runtime.replicas=1", "--buffer.max_staleness=0",
                            f"--run.steps={cap}"))
    steps = summary["steps"]
    assert summary["stopped"] == "SIGTERM" and steps < cap, "the new replica sent no groups"
    report, rows = _accounted(tmp_path / "grow", summary, steps, untaken=1)
    assert [(d["action"], d["reason"], d["replicas"]) for d in report["elastic"]] == [("add", "trainer_waits", 2)]
    assert report["drained"] == []
    assert sorted(report["nodes"].values()) == sorted(n.node_id for n in cluster.nodes)  # one per engine node
    assert report["groups"]["rollout-1"] > 0
    decided = [r for r in rows if r.get("elastic/decision") == 1]
    assert len(decided) == 1 and decided[0]["elastic/wait_fraction"] >= 0.3  # scale_up_wait, the default


def test_a_trainer_that_is_the_bottleneck_drains_a_replica_it_does_not_need(tmp_path, cluster):
    """The trainer works far longer than the replicas generate (one sample row per micro-batch,
    four optimizer steps per batch; two tokens a sample) and the rollout runs two versions
    ahead: it hardly waits and the engines idle, so the policy drains one replica. It finishes
    the groups it was sent (they are trained like any other), then leaves."""
    steps = 12
    summary = train(_config(tmp_path, cluster, "shrink", *ELASTIC, "--runtime.replicas=2", "--rollout.max_tokens=2",
                            "--buffer.max_staleness=2", "--buffer.queue_size=2", "--buffer.drop_uniform_groups=false",
                            "--trainer.micro_batch_tokens=8", "--algorithm.mini_batches=4", f"--run.steps={steps}",
                            "--runtime.scale_up_wait=0.9"))  # a wait now and then adds none back
    assert summary["stopped"] is None
    report, rows = _accounted(tmp_path / "shrink", summary, steps)
    assert [(d["action"], d["reason"], d["replicas"]) for d in report["elastic"]] == [
        ("remove", "trainer_bottleneck", 1)]
    [drained] = report["drained"]
    assert report["groups"][drained] > 0 and report["groups"][({"rollout-0", "rollout-1"} - {drained}).pop()] > 0
    removed = [r for r in rows if r.get("elastic/decision") == -1]
    assert len(removed) == 1 and removed[0]["elastic/idle_fraction"] >= 0.6  # scale_down_idle, the default
    assert rows[-1]["elastic/replicas"] == 1 and rows[-1]["elastic/changing"] == 0  # it left before the end


def _rows(path):
    """The metrics rows written so far (a line still being written is left out)."""
    text = path.read_text() if path.exists() else ""
    return [json.loads(line) for line in text[:text.rfind("\n") + 1].splitlines()]


def test_a_node_removed_mid_run_loses_its_replica_and_one_that_joins_takes_its_place(tmp_path, cluster, monkeypatch):
    """Runs last in the module: it takes a node away after step 2 and adds another. The lost
    replica's groups go to the other; with `runtime.max_replicas = 2` a new replica starts on the
    node that joined and sends groups (its worker process may take a minute to start: the run goes
    on meanwhile). Two steps after it did, the test asks the run to stop, as a SIGTERM would; the
    run finishes with every sample of its steps accounted for."""
    import tempering.train as train_module
    from tempering.runtime.stop import StopRequest

    asked = threading.Event()

    class Stop(StopRequest):  # the test's SIGTERM: the run is in a thread, where no handler is installed
        def is_set(self) -> bool:
            if asked.is_set():
                self.request("SIGTERM")
            return super().is_set()

    monkeypatch.setattr(train_module, "StopRequest", Stop)
    cap = 200  # steps: the run ends here if no replica ever joins
    metrics = tmp_path / "lost" / "metrics.jsonl"
    result: list = []

    def run():
        try:
            result.append(train(_config(tmp_path, cluster, "lost", f"--run.steps={cap}", "--runtime.max_replicas=2")))
        except BaseException as e:  # noqa: BLE001 - raised again below, in the test's thread
            result.append(e)

    # the run in a thread: Ray starts a node only from the main thread, which changes the cluster
    trainer = threading.Thread(target=run, daemon=True)
    trainer.start()
    removed, joined, deadline = [], [], time.monotonic() + 600
    while trainer.is_alive() and not asked.is_set() and time.monotonic() < deadline:
        rows = _rows(metrics)
        if not removed and len(rows) >= 2:
            node = cluster.nodes[1]
            cluster.cluster.remove_node(node)
            removed.append(node.node_id)
            joined.append(cluster.cluster.add_node(num_cpus=1, resources={"engine": 1}).node_id)
        new = [i for i, r in enumerate(rows)
               if any(k.startswith("replicas/") and k not in ("replicas/rollout-0", "replicas/rollout-1") for k in r)]
        if removed and new and len(rows) >= new[0] + 3:
            asked.set()
        time.sleep(0.05)
    asked.set()
    trainer.join(600)
    assert result and not isinstance(result[0], BaseException), result
    summary = result[0]
    assert removed and joined, "the run ended before step 2 was logged"
    assert summary["stopped"] == "SIGTERM" and summary["steps"] < cap, "no replica joined in time"
    report = summary["replicas"]
    lost = [name for name, node in report["nodes"].items() if node == removed[0]]
    assert list(report["lost"]) == lost and "died" in report["lost"][lost[0]]
    # a replica started on the new node, and it sent groups; one started while Ray still counted
    # the removed node's resources as free (its view lags) and never placed is given up (node "")
    started = {name: node for name, node in report["nodes"].items() if name not in ("rollout-0", "rollout-1")}
    assert list(started.values()).count(joined[0]) == 1 and set(started.values()) <= {joined[0], ""}, started
    assert all(report["groups"][name] > 0 for name, node in started.items() if node == joined[0]), report
    # every group of the steps taken ran to its batch: trained or dropped with a reason, none missing
    fates = _fates(tmp_path / "lost")
    steps = summary["steps"]
    assert len(fates) == steps * TASKS * SAMPLES and set(fates) <= {"trained", "stale", "failed", "uniform", "alone"}
    rows = _rows(metrics)
    assert len(rows) == steps
    assert sum(r.get("samples/requeued_groups", 0) for r in rows) == report["requeued_groups"]
    print(f"{steps} steps, requeued {report['requeued_groups']} groups, superseded {report['superseded_groups']}")
