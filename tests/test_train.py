"""End to end: a few steps of the real loop, and resuming after the process is killed."""

import json
import os
import signal
import sqlite3
import subprocess
import time
from collections import Counter

import pytest
import torch
from run_helpers import ROOT, train_command

cli = train_command


def test_short_run_end_to_end(short_run):
    assert short_run.returncode == 0, short_run.stderr[-3000:]
    run = short_run.dir
    summary = json.loads((run / "summary.json").read_text())
    assert {"baseline_accuracy", "final_accuracy", "wall_seconds"} <= set(summary)
    assert summary["steps"] == 3
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3]
    # checkpoints after steps 2 (checkpoint_every) and 3 (the final one), each timed in its own step's row
    assert [r.get("seconds/checkpoint", 0) > 0 for r in rows] == [False, True, True]
    for key in ("reward/mean", "tokens_per_s", "staleness/mean", "samples/trained"):
        assert key in rows[0], key
    assert any(k.startswith("reward/domain/") for k in rows[0])
    # every sample generated for the 3 steps is accounted for: 3 steps x 4 tasks x 4 samples
    fates = [json.loads(line)["fate"] for line in (run / "samples.jsonl").read_text().splitlines()]
    assert len(fates) == 48 and set(fates) <= {"trained", "stale", "failed", "uniform", "alone"}
    # ... and in the lineage store, in full, with every tool call the metrics counted as a row of its own
    from tempering.lineage import read_samples

    assert [s.fate for s in read_samples(run)] == fates
    with sqlite3.connect(f"file:{run / 'lineage.sqlite'}?mode=ro", uri=True) as db:
        calls = db.execute("SELECT count(*) FROM tool_calls").fetchone()[0]
    assert calls == sum(r.get("tools/calls", 0) for r in rows)
    assert list((run / "tensorboard").glob("events.out.tfevents.*"))
    assert (run / "reward_per_domain.png").stat().st_size > 1000
    assert (run / "checkpoints" / "latest").read_text() == "step-000003"
    # eval.every=2: one held-out evaluation during RL, besides the baseline and the final one
    assert sorted(p.name for p in run.glob("eval_*.json")) == [
        "eval_baseline.json", "eval_final.json", "eval_step-000002.json"]
    # the demo mix runs model-written programs, and by default in the isolated sandbox
    executions = [json.loads(line) for line in (run / "sandbox.jsonl").read_text().splitlines()]
    assert executions and all(e["backend"] == "bwrap" for e in executions)
    # both schedulers are on the path: the global one's per-domain shares, weights and levels, and
    # the node's queue, whose jobs are the sandbox executions tagged with their domain
    for kind in ("share_target", "share", "weight", "level"):
        assert {k.rsplit("/", 1)[1] for k in rows[-1] if k.startswith(f"scheduler/{kind}/")} == {
            "sorting", "strings", "code", "files"}, kind
    assert abs(sum(v for k, v in rows[-1].items() if k.startswith("scheduler/share_target/")) - 1) < 1e-6
    assert {e["domain"] for e in executions} == {"code"} and all("sandbox_queue/queued" in r for r in rows)
    # every training job waited in the node's queue: a group's report covers the jobs started before it
    assert sum(r["sandbox_queue/jobs"] for r in rows) >= len([e for e in executions if e["batch"] is not None])
    transformers = pytest.importorskip("transformers")
    transformers.AutoModelForCausalLM.from_pretrained(run / "checkpoints" / "step-000003" / "model")


def test_prometheus_endpoint_served_each_step_while_the_run_lived(short_run):
    from prometheus_client.parser import text_string_to_metric_families

    rows = {r["step"]: r for r in map(json.loads, (short_run.dir / "metrics.jsonl").read_text().splitlines())}
    seen = {}  # step -> the samples of one scrape that served it
    for text in short_run.scrapes:
        samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
                   for family in text_string_to_metric_families(text) for s in family.samples}
        step = int(samples[("tempering_step", ())])
        if step in rows:
            seen[step] = samples
    # step 1's values are served through the evaluation at step 2 (after step 3 the run ends at once)
    assert seen, f"no scrape served a step ({len(short_run.scrapes)} scrapes)"
    step = max(seen)
    samples, row = seen[step], rows[step]
    for name, key in (("tempering_reward_mean", "reward/mean"), ("tempering_tokens_per_second", "tokens_per_s"),
                      ("tempering_staleness_mean", "staleness/mean"), ("tempering_staleness_max", "staleness/max")):
        assert samples[(name, ())] == pytest.approx(row[key]), name
    # a domain with no sample in that step has no row key (its gauge keeps an earlier step's value)
    domains = [d for d in ("sorting", "strings", "code", "files") if f"reward/domain/{d}" in row]
    assert len(domains) >= 2, sorted(row)
    for domain in domains:
        assert samples[("tempering_domain_reward", (("domain", domain),))] == pytest.approx(
            row[f"reward/domain/{domain}"])
        assert samples[("tempering_domain_pass_rate", (("domain", domain),))] == pytest.approx(row[f"outcome/{domain}"])
    assert samples[("tempering_metric", (("name", "seconds/step"),))] == pytest.approx(row["seconds/step"])


def test_two_trainer_ranks_write_shards_and_a_resume_continues_in_a_new_group(tmp_path):
    # the RL trainer as 2 FSDP2 ranks (gloo), each writing its own shards (DCP) beside rank 0's
    # HF model; a resume into a new group reads each rank's shards (TrainerGroup.load). (A single
    # process reading them whole, and both resumes continuing exactly: tests/trainer/test_group.py.)
    ranks = ["--runtime.trainer_ranks=2", "--runtime.checkpoint_format=sharded"]

    def train(steps: int, *args: str) -> list[int]:
        r = subprocess.run(cli(tmp_path, "--run.name=ranks", f"--run.steps={steps}", "--run.checkpoint_every=2",
                               "--buffer.drop_uniform_groups=false", *args),
                           capture_output=True, text=True, timeout=300, cwd=ROOT)
        assert r.returncode == 0, r.stderr[-3000:]
        rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        assert all(row["tokens"] > 0 for row in rows)
        return [row["step"] for row in rows]

    from tempering.models import load_hf

    run = tmp_path / "ranks"
    assert train(3, *ranks) == [1, 2, 3]
    first = run / "checkpoints" / "step-000002"
    assert {p.name for p in first.iterdir()} == {"model", "sharded", "shards.json", "rng.pt", "state.json"}
    assert train(5, *ranks, "--resume") == [1, 2, 3, 4, 5]
    assert (run / "checkpoints" / "step-000005" / "shards.json").is_file()
    third = load_hf(run / "checkpoints" / "step-000003" / "model").state_dict()
    fifth = load_hf(run / "checkpoints" / "step-000005" / "model").state_dict()
    assert any(not torch.equal(third[k], fifth[k]) for k in third)  # the new group went on training
    _engines_got(run, fifth)


def _engines_got(run, final: dict) -> None:
    """What the run's engines last read (each trainer rank's own shards, assembled) is the trainer's
    final model, as its last checkpoint holds it."""
    from tempering.weights.shards import ShardSource

    source = ShardSource(run / "weights")
    published = source.state(source.version)
    assert source.version == json.loads((run / "summary.json").read_text())["steps"]
    assert set(published) <= set(final) and len(published) >= len(final) - 1  # a tied head once
    for name, v in published.items():
        assert torch.equal(v, final[name]), name


def test_a_pipelined_trainer_runs_checkpoints_and_resumes_at_data_parallel(tmp_path):
    # the RL trainer as 2 pipeline stages (trainer.parallelize.pp = 2): each stage publishes its own
    # weights for the engines and writes its shards, rank 0 exports the full model assembled from
    # both, and a resume at dp = 2 reads the shards (the numbers against the single-process trainer: tests/trainer/test_pipeline_group.py)
    ranks = ["--runtime.trainer_ranks=2", "--runtime.checkpoint_format=sharded"]
    run = tmp_path / "pp"

    def train(steps: int, *args: str) -> list[dict]:
        r = subprocess.run(cli(tmp_path, "--run.name=pp", f"--run.steps={steps}", "--run.checkpoint_every=2",
                               "--buffer.drop_uniform_groups=false", *ranks, *args),
                           capture_output=True, text=True, timeout=300, cwd=ROOT)
        assert r.returncode == 0, r.stderr[-3000:]
        return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]

    from tempering.models import load_hf

    rows = train(2, "--trainer.parallelize.pp=2")
    assert [r["step"] for r in rows] == [1, 2] and all(0 < r["pipeline_bubble"] < 1 for r in rows)
    _engines_got(run, load_hf(run / "checkpoints" / "step-000002" / "model").state_dict())  # both stages' shards
    rows = train(3, "--resume")  # trainer.parallelize back at its default: FSDP over both ranks
    assert [r["step"] for r in rows] == [1, 2, 3] and "pipeline_bubble" not in rows[-1]
    second = load_hf(run / "checkpoints" / "step-000002" / "model").state_dict()
    third = load_hf(run / "checkpoints" / "step-000003" / "model").state_dict()
    assert any(not torch.equal(second[k], third[k]) for k in second)
    _engines_got(run, third)


def test_resume_after_kill_continues_steps_and_optimizer(tmp_path):
    # enough SFT that the code domain writes programs that end (and so run in the sandbox)
    args = cli(tmp_path, "--run.name=r", "--run.checkpoint_every=2", "--buffer.drop_uniform_groups=false", "--sft.steps=300")
    proc = subprocess.Popen([*args, "--run.steps=400"], cwd=ROOT, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    ckpts = tmp_path / "r" / "checkpoints"
    deadline = time.monotonic() + 240
    while not (ckpts / "step-000004").exists():
        assert proc.poll() is None, proc.stderr.read().decode()[-3000:]
        assert time.monotonic() < deadline, "no checkpoint appeared"
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)  # the trainer and its rollout worker, mid-run
    proc.wait()
    latest = int((ckpts / "latest").read_text().split("-")[1])
    baseline = (tmp_path / "r" / "eval_baseline.json").read_text()

    r = subprocess.run([*args, "--resume", f"--run.steps={latest + 2}"], capture_output=True, text=True,
                       timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    assert (tmp_path / "r" / "eval_baseline.json").read_text() == baseline  # no second warm-up
    # The logs are rewound to the checkpoint, then continued: one row per step, no torn lines.
    steps = [json.loads(line)["step"] for line in (tmp_path / "r" / "metrics.jsonl").read_text().splitlines()]
    assert steps == list(range(1, latest + 3))
    fates = [json.loads(line) for line in (tmp_path / "r" / "samples.jsonl").read_text().splitlines()]
    assert len(fates) == (latest + 2) * 16 and {f["step"] for f in fates} == set(range(latest + 2))
    # sandbox.jsonl is rewound too: every execution of a rollout batch joins to a code sample of
    # that step in samples.jsonl (by its id), none ran twice, and each names its process. (The
    # killed run's batches after the checkpoint drew other tasks: without the rewind their rows
    # would join to nothing.)
    runs = [json.loads(line) for line in (tmp_path / "r" / "sandbox.jsonl").read_text().splitlines()]
    batch_runs = [(r["batch"], r["sample"]) for r in runs if r.get("batch") is not None]
    code = {(f["step"], f"{f['task']}/{f['sample']}") for f in fates if f["domain"] == "code"}
    assert batch_runs and set(batch_runs) <= code and len(set(batch_runs)) == len(batch_runs)
    assert all(r["process"] and r["pid"] for r in runs)

    import torch

    final = ckpts / f"step-{latest + 2:06d}"
    state = json.loads((final / "state.json").read_text())
    assert state["step"] == latest + 2 and state["version"] == latest + 2
    opt = torch.load(final / "trainer.pt", weights_only=False)["optimizer"]
    assert all(int(s["step"]) == latest + 2 for s in opt["state"].values())  # AdamW moments carried over
    assert json.loads((tmp_path / "r" / "summary.json").read_text())["steps"] == latest + 2


def test_rewind_drops_torn_lines_and_rows_after_the_checkpoint(tmp_path):
    from tempering.metrics import rewind_jsonl

    log = tmp_path / "metrics.jsonl"
    log.write_text('{"step": 1}\n{"step": 2}\n{"step": 3}\n{"st')
    rewind_jsonl(log, lambda row: row["step"] <= 2)
    assert log.read_text() == '{"step": 1}\n{"step": 2}\n'


def _fates(run):
    return [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]


def _ends_cleanly(run, stopped):
    """What a run stopped early must leave: a checkpoint at its last step, the final evaluation,
    and a summary that says why it stopped."""
    summary = json.loads((run / "summary.json").read_text())
    assert summary["stopped"] == stopped
    latest = (run / "checkpoints" / "latest").read_text()
    assert latest == f"step-{summary['steps']:06d}"
    assert (run / "eval_final.json").exists()
    return summary


def test_max_seconds_ends_the_run_cleanly_and_resume_continues(tmp_path):
    args = cli(tmp_path, "--run.name=budget", "--run.checkpoint_every=0")
    r = subprocess.run([*args, "--run.steps=100000", "--run.max_seconds=15"], capture_output=True, text=True,
                       timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    run = tmp_path / "budget"
    summary = _ends_cleanly(run, "run.max_seconds")
    done = summary["steps"]
    assert done < 100000
    r = subprocess.run([*args, "--resume", f"--run.steps={done + 2}"], capture_output=True, text=True,
                       timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] == done + 2 and summary["stopped"] is None
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows] == list(range(1, done + 3))
    # wall clock in every row; elapsed run time counts the first invocation too
    assert all(row["time"] > 1e9 for row in rows)
    assert rows[-1]["elapsed_s"] > 15


# SIGTERM to a run is also in tests/runtime/test_ray_signal.py (on the Ray runtime); here with -m slow
@pytest.mark.parametrize("sig", [pytest.param(signal.SIGTERM, marks=pytest.mark.slow), signal.SIGINT])
def test_a_signal_mid_run_ends_it_cleanly_and_resume_continues(tmp_path, sig):
    """SIGTERM (a scheduler) or SIGINT (Ctrl-C) to the whole process group: the run finishes with
    a checkpoint, the final evaluation and its summary. SIGINT is sent to a run that inherited it
    ignored, as one started in the background of a non-interactive shell does."""
    args = cli(tmp_path, "--run.name=sig", "--run.checkpoint_every=0")
    inherit_ignored = (lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if sig == signal.SIGINT else None
    proc = subprocess.Popen([*args, "--run.steps=100000"], cwd=ROOT, start_new_session=True,
                            preexec_fn=inherit_ignored, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    metrics = tmp_path / "sig" / "metrics.jsonl"
    deadline = time.monotonic() + 240
    while not (metrics.exists() and len(metrics.read_text().splitlines()) >= 3):
        assert proc.poll() is None, proc.stderr.read().decode()[-3000:]
        assert time.monotonic() < deadline, "no RL steps appeared"
        time.sleep(0.2)
    os.killpg(proc.pid, sig)  # every process of the run, as a terminal or a scheduler does
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, err.decode()[-3000:]
    assert "Traceback" not in err.decode()
    run = tmp_path / "sig"
    summary = _ends_cleanly(run, sig.name)
    done = summary["steps"]
    assert done >= 3
    # the demo mix runs code: the sandbox kept working through the signal (no infrastructure failures)
    assert json.loads((run / "eval_final.json").read_text())["failed"] == 0
    printed = out.decode()
    assert json.loads(printed[printed.index("\n{\n"):])["stopped"] == sig.name  # the summary, printed last
    r = subprocess.run([*args, "--resume", f"--run.steps={done + 1}"], capture_output=True, text=True,
                       timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads((run / "summary.json").read_text())["steps"] == done + 1
    assert {f["step"] for f in _fates(run)} == set(range(done + 1))


def test_a_text_only_run_starts_no_sandbox(tmp_path):
    """sorting and strings run no code: a bwrap that cannot start would fail a run that
    starts the sandbox anyway."""
    r = subprocess.run(cli(tmp_path, "--run.name=text", "--run.steps=2", "--sandbox.bwrap=/nonexistent/bwrap",
                           "--tasks.weights={sorting = 1.0, strings = 1.0}"),
                       capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    assert not (tmp_path / "text" / "sandbox.jsonl").exists()
    # the same mix with the code domain does start it, and says what is missing
    r = subprocess.run(cli(tmp_path, "--run.name=code", "--run.steps=2", "--sandbox.bwrap=/nonexistent/bwrap"),
                       capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 2 and "/nonexistent/bwrap" in r.stderr


def test_oversubscribed_threads_are_warned_about(tmp_path):
    import os as _os

    cores = len(_os.sched_getaffinity(0))
    r = subprocess.run(cli(tmp_path, "--run.name=threads", "--run.steps=1", f"--run.threads={cores}",
                           "--tasks.weights={sorting = 1.0}"),
                       capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    assert f"run.threads = {cores} in each of 2 processes asks for {2 * cores} threads on {cores} cores" in r.stderr


def test_dynamic_sampling_redraws_groups_without_signal(tmp_path):
    """DAPO's dynamic sampling end to end: a barely warmed-up model leaves many groups with equal
    rewards; each is re-drawn (up to the cap per batch), every sample still gets one lineage row,
    and what a step trains comes only from groups with signal."""
    r = subprocess.run(cli(tmp_path, "--run.name=ds", "--run.steps=2", "--run.checkpoint_every=0",
                           "--buffer.dynamic_sampling=6"), capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    run = tmp_path / "ds"
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    refilled = [row["samples/refilled_groups"] for row in rows]
    assert all(0 <= n <= 6 for n in refilled) and sum(refilled) > 0
    samples = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
    assert len(samples) == 4 * (4 * 2 + sum(refilled))  # 4 samples a group, 4 groups a step, plus the re-drawn
    for step, row in enumerate(rows):
        fates = Counter(s["fate"] for s in samples if s["step"] == step)
        assert fates["uniform"] >= 4 * refilled[step] - fates["alone"] - fates["failed"]


@pytest.mark.parametrize("algo, resume", [
    pytest.param(["--algorithm.advantage=gae", "--algorithm.aggregation=token_mean", "--algorithm.kl_coef=0.01"],
                 True, marks=pytest.mark.slow),  # the critic's checkpoint round trip: tests/test_trainer.py
    (["--algorithm.aggregation=token_mean", "--algorithm.clip_high=0.28", "--algorithm.overlong_buffer=8",
      "--algorithm.off_policy=decoupled", "--algorithm.is_cap=2"], False),
], ids=["ppo-gae", "dapo-decoupled"])
def test_short_run_with_other_algorithms(tmp_path, algo, resume):
    """Two steps with each family of settings; PPO's stops after one, checkpoints, and resumes
    for the second (its critic and reference come back from trainer.pt)."""
    quick = ["--run.name=algo", "--tasks.eval_per_domain=2", "--metrics.tensorboard=false", "--metrics.plot=false",
             "--eval.every=0", *algo]
    runs = [["--run.steps=1"], ["--run.steps=2", "--resume"]] if resume else [["--run.steps=2"]]
    for extra in runs:
        r = subprocess.run(cli(tmp_path, *quick, *extra), capture_output=True, text=True, timeout=300, cwd=ROOT)
        assert r.returncode == 0, r.stderr[-3000:]
    run = tmp_path / "algo"
    if resume:
        import torch

        state = torch.load(run / "checkpoints" / "step-000001" / "trainer.pt", weights_only=False)
        assert {"critic", "critic_optimizer", "reference"} <= set(state)
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    trained = [r for r in rows if "loss" in r]
    assert trained and all("is_weight_mean" in r for r in trained)
    if resume:
        assert all(r["value_loss"] > 0 for r in trained)


@pytest.mark.parametrize("partial", [False, True])
def test_without_partial_rollouts_every_request_is_one_version(tmp_path, partial):
    """Two versions ahead, so weights change while requests run. Without partial rollouts the
    engine drains before it loads: a single-turn sample's tokens all come from one version, and
    the drain is timed. With them every version is loaded as published (no drain)."""
    r = subprocess.run(cli(tmp_path, "--run.name=pr", "--run.steps=4", "--run.checkpoint_every=0", "--eval.every=0",
                           "--buffer.max_staleness=2", "--buffer.queue_size=2", "--tasks.eval_per_domain=2",
                           "--metrics.tensorboard=false", "--metrics.plot=false",
                           f"--rollout.partial_rollouts={str(partial).lower()}"),
                       capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    run = tmp_path / "pr"
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["seconds/syncs"] >= 2 and all(row["seconds/weight_publish"] > 0 for row in rows)
    assert all(0 < row["seconds/engine_busy"] for row in rows)
    samples = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
    single_turn = [s for s in samples if s["domain"] != "files"]
    assert single_turn and all(s["versions"][0] >= 0 for s in single_turn)
    if not partial:
        assert all(s["versions"][0] == s["versions"][1] for s in single_turn)
    else:
        assert all(row["seconds/weight_drain"] == 0 for row in rows)
