"""Synchronous against asynchronous RL on one workload with heavy-tailed output lengths and
sandbox latencies: how much each mechanism of the asynchronous design buys.

The workload is the `longtail` domain (`bench/async_workload.py`, loaded as a plugin): reverse
a word whose length is Pareto-distributed (3 to 40 letters), checked in the real sandbox by a
program that sleeps a lognormal time (median 0.12 s, capped at 4 s) before printing the answer
back. The real engine, trainer, sandbox (bwrap) and reward service run it, on the demo's tiny
model. One short SFT warm-up is run first and its checkpoint is every mode's `model.path`, so
every mode starts from the same weights (and the same held-out accuracy).

Then the same RL run (`tempering.train.train`, with a `Config` built as the CLI builds it) is
repeated, one mode after another in this process tree, each under the same wall-clock budget:

  sync              buffer.max_staleness = 0 (rollout waits for the trainer and vice versa)
  overlap           max_staleness = 1: the next batch is generated while the trainer steps
  async_k2, _k4     max_staleness = 2, 4: batches overlap each other's slow tails
  async_k4_partial  k = 4 with rollout.partial_rollouts = true (new weights interrupt running
                    requests instead of the engine draining them first); the k <= 4 modes
                    run with partial_rollouts = false. Left out, with a note, when this
                    tempering has no such key.

`buffer.queue_size` is k + 1 in every mode, so that admission is bounded by the staleness
bound alone (a batch that completes out of order never holds the next one back), and
`sandbox.workers` = `reward.workers` = `--slots` (64), so that sleeping checks, which cost no
CPU, never make the sandbox the bottleneck. The budget is counted from the moment the rollout
worker is ready (its start-up is the same in every mode and is left out), the baseline
evaluation is the warm-up's (the same weights), and the final evaluation comes after the
budget; the RL loop ends at the first step boundary past the budget, and work still in flight
then is lost (counted against the async modes, which have more of it).

Per mode, from `metrics.jsonl` (RL wall time = worker ready to the loop's end):
  samples_per_s      trained samples per second of RL wall time (`generated_per_s` adds the
                     dropped ones: uniform groups, failed checks; stale ones cannot occur)
  trainer_idle       1 - (sum over steps of `seconds/step` - `seconds/wait_rollout`) / wall:
                     the time the trainer had no batch to train on
  engine_idle        1 - engine busy / wall, busy being `seconds/engine_busy` (cumulative)
                     when the step records have it, else the sum of `seconds/rollout_generate`
                     (the runner's wall time inside engine steps); `engine_busy_source` says which
  staleness_mean     staleness of the trained samples, weighted by samples
  reward_end         mean training reward (outcome + 0.5 partial) of the steps that ended in
                     the last 10% of the budget (at least the last 3); modes end at different
                     batches, whose task mixes differ, so this compares them only roughly
  heldout_reward     the reward the policy the budget ended with earns on the held-out tasks
                     (the run's evaluation set, 512 tasks, 4 answers each sampled as in training,
                     graded as in training; `heldout_reward_greedy`: one greedy answer each):
                     the comparison of reward that counts
  eval_accuracy      the run's own final evaluation: greedy exact reversals on the same tasks
plus steps, wall, the worker's start-up, the weight syncs' seconds (`weight_drain`: the engine
draining before a load, partial_rollouts off), and the machine's CPU use while the mode ran
(`cpu_machine`: busy cores from /proc/stat; `cpu_ours`: this process tree's), since on a
shared machine other work takes cores too: compare modes of one run, not runs.

Prints one JSON object: {"baseline": the warm-up's numbers, "modes": {...}, "best_mode",
"speedup_best_vs_sync", "reward_not_lower" (best mode against sync), "contributions": ratios of
samples_per_s (overlap: overlap/sync; staleness_1_to_2: k2/overlap; staleness_2_to_4: k4/k2;
partial_rollouts: k4 partial/k4), ...}; progress goes to stderr (as does everything the runs
print), run folders to --out. About 10 minutes with the defaults (5 x 90 s of RL, the warm-up,
start-ups and evaluations).
Usage: python bench/async.py [--budget-s 90] [--out DIR] [--modes sync,overlap,...] [--slots 64]
                             [--lr 1e-4] [--sft-steps 120] [--warmup-from DIR] [--set section.key=value]
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the workload plugin (spawned workers inherit it)

import torch  # noqa: E402

import async_workload  # noqa: E402
import tempering.train as train_mod  # noqa: E402
from tempering.config import Config, RolloutConfig, load_config  # noqa: E402
from tempering.engine import LLM, SamplingParams  # noqa: E402
from tempering.evaluation import EvalResult  # noqa: E402
from tempering.models import load_hf  # noqa: E402
from tempering.pool import TaskPool  # noqa: E402
from tempering.records import Trajectory  # noqa: E402
from tempering.verdict import VerifierContext  # noqa: E402
from tempering.tasks.answers import read_answer  # noqa: E402
from tempering.tokenizer import load_tokenizer  # noqa: E402
from tempering.trainer.checkpoint import latest_checkpoint  # noqa: E402

# name -> (max_staleness, partial_rollouts)
MODES = {"sync": (0, False), "overlap": (1, False), "async_k2": (2, False), "async_k4": (4, False),
         "async_k4_partial": (4, True)}
HAS_PARTIAL = "partial_rollouts" in {f.name for f in dataclasses.fields(RolloutConfig)}

REWARD = {"outcome": 1.0, "partial": 0.5}  # reward.weights of every run
MODEL = ["--model.hidden_size=128", "--model.intermediate_size=352", "--model.num_hidden_layers=4",
         "--model.num_attention_heads=4", "--model.num_key_value_heads=2", "--model.max_position_embeddings=128"]


def log(msg: str) -> None:
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


def base_overrides(out: Path, slots: int, seed: int, lr: float) -> list[str]:
    max_tokens = async_workload.MAX_LEN + 1
    return [
        f"--run.dir={json.dumps(str(out))}", "--run.steps=1000000", "--run.checkpoint_every=0", "--run.threads=1",
        f"--run.seed={seed}", "--run.stall_timeout_s=300",
        '--tasks.weights={ longtail = 1.0 }', '--tasks.plugins=["async_workload"]', "--tasks.eval_per_domain=512",
        "--tasks.sft_per_domain=4000",
        "--rollout.tasks_per_step=16", "--rollout.samples_per_task=8", "--rollout.temperature=1.0",
        f"--rollout.max_tokens={max_tokens}", f"--eval.max_tokens={max_tokens}",
        "--reward.weights={ " + ", ".join(f"{k} = {v}" for k, v in REWARD.items()) + " }",
        f"--reward.workers={slots}", "--reward.timeout_s=60",
        f"--sandbox.workers={slots}", "--sandbox.time_limit_s=15",
        f"--trainer.lr={lr}", "--trainer.micro_batch_tokens=2048",
        "--metrics.progress=false", "--metrics.tensorboard=false", "--metrics.plot=false",
    ]


# ---------------------------------------------------------------------------------------------
# Running one mode: tempering.train.train, with the budget counted from the worker being ready


@dataclasses.dataclass
class Clock:
    budget_s: float
    spawned_at: float | None = None  # time.time() when the rollout worker was spawned
    ready: float | None = None  # ... when it was ready to generate
    ready_wall: float | None = None  # the same instant, as time.time()
    ended: float | None = None  # when the RL loop returned


@contextlib.contextmanager
def patched(clock: Clock | None, baseline: EvalResult | None) -> Iterator[None]:
    """Within: `train()` skips the baseline evaluation (returns `baseline`: the weights are the
    warm-up's, already evaluated); without a `clock` (the warm-up, no RL step) it evaluates once
    and reports that as the final evaluation too; with a `clock`, its RL loop gets
    `clock.budget_s` seconds from the moment the rollout worker is ready, however long the
    worker took to start (this bench's own wiring: `train` itself counts `run.max_seconds`
    from its start, set-up and evaluations included)."""
    saved = {name: getattr(train_mod, name) for name in ("run_eval", "rollout_spec", "rl_loop")}
    evals: dict[str, EvalResult] = {}

    def run_eval(run, rollout, label):
        if label == "baseline" and baseline is not None:
            return baseline
        if label == "final" and clock is None and "baseline" in evals:  # no RL step: the same weights
            return evals["baseline"]
        evals[label] = saved["run_eval"](run, rollout, label)
        return evals[label]

    def rollout_spec(run):
        spec = saved["rollout_spec"](run)
        if clock is not None:
            clock.spawned_at = spec.spawned_at
        return spec

    def rl_loop(run, rollout, stop):
        if clock is None:
            return saved["rl_loop"](run, rollout, stop)
        stop.deadline = None  # set once the worker is ready (its first batch says when that was)
        next_batch = rollout.next_batch

        def timed_next_batch(*args, **kwargs):
            batch = next_batch(*args, **kwargs)
            if batch is not None and clock.ready is None:
                now, wall = time.monotonic(), time.time()
                startup = batch.startup_s
                clock.ready_wall = clock.spawned_at + startup if startup is not None and clock.spawned_at else wall
                clock.ready = now - (wall - clock.ready_wall)
                stop.deadline = clock.ready + clock.budget_s
            return batch

        rollout.next_batch = timed_next_batch
        try:
            return saved["rl_loop"](run, rollout, stop)
        finally:
            clock.ended = time.monotonic()

    train_mod.run_eval, train_mod.rollout_spec, train_mod.rl_loop = run_eval, rollout_spec, rl_loop
    try:
        yield
    finally:
        for name, fn in saved.items():
            setattr(train_mod, name, fn)


class CpuMeter:
    """Busy cores of the whole machine (/proc/stat) and CPU seconds of this process tree
    (this process and its reaped children, the rollout worker included once it has ended)."""

    def __enter__(self) -> "CpuMeter":
        self.t, self.machine, self.ours = time.monotonic(), _machine_busy(), _our_cpu()
        return self

    def __exit__(self, *exc) -> None:
        dt = time.monotonic() - self.t
        self.result = {"cpu_machine": round((_machine_busy() - self.machine) / dt, 2),
                       "cpu_ours": round((_our_cpu() - self.ours) / dt, 2), "cores": os.cpu_count(),
                       "loadavg_1m_end": round(os.getloadavg()[0], 2)}


def _machine_busy() -> float:
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def _our_cpu() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def run_train(cfg: Config, clock: Clock | None, baseline: EvalResult | None) -> dict[str, Any]:
    with patched(clock, baseline):
        return train_mod.train(cfg)


def heldout_reward(model_dir: Path, cfg: Config, samples: int = 4, seed: int = 0) -> dict[str, float]:
    """The reward of a checkpoint on the held-out tasks (the run's evaluation set): `samples`
    answers per task sampled as in training (temperature 1) and one greedy answer, graded as
    the training reward is (`async_workload.grade`, `REWARD`). The sandbox is left out: its
    program only prints the answer back, and its latency is not what is measured here. Graded
    and sampled, this moves more smoothly with learning than exact greedy accuracy."""
    tokenizer = load_tokenizer(model_dir)
    engine = LLM(load_hf(model_dir), tokenizer, cfg.engine)
    tasks = TaskPool(cfg.tasks).heldout()
    prompts = [tokenizer.encode_prompt(t.prompt) for t in tasks]
    ctx = VerifierContext(tokenizer)
    torch.manual_seed(seed)
    out: dict[str, float] = {}
    max_tokens = cfg.rollout.max_tokens
    for name, params in (("heldout_reward", SamplingParams(n=samples, temperature=1.0, max_tokens=max_tokens)),
                         ("heldout_reward_greedy", SamplingParams(temperature=0.0, max_tokens=max_tokens))):
        rewards = []
        for task, result in zip(tasks, engine.generate(prompts, params)):
            for c in result.outputs:
                sample = Trajectory(task.id, task.domain, c.index, list(result.prompt_token_ids), list(c.token_ids),
                                    list(c.logprobs), [1] * len(c.token_ids), list(c.versions), c.text,
                                    c.finish_reason or "abort")
                answer = read_answer(sample, ctx)
                verdict = async_workload.grade(task, answer.text.strip(), answer.problem)
                rewards.append(sum(w * verdict.components[k] for k, w in REWARD.items()))
        out[name] = round(sum(rewards) / len(rewards), 4)
    return out


# ---------------------------------------------------------------------------------------------
# Reading a mode's metrics


def summarize(run_dir: Path, clock: Clock, summary: dict[str, Any]) -> dict[str, Any]:
    """A mode's numbers from its metrics.jsonl (one flat row per step: "samples/trained", ...)."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    rows = [r for r in rows if "samples/trained" in r]
    wall = clock.ended - clock.ready
    col = lambda key: [r.get(key, 0.0) for r in rows]
    trained = sum(col("samples/trained"))
    dropped = {k.split("_", 1)[1]: sum(col(k)) for k in sorted({k for r in rows for k in r})
               if k.startswith("samples/dropped_")}
    trainer_busy = sum(col("seconds/step")) - sum(col("seconds/wait_rollout"))
    if any("seconds/engine_busy" in r for r in rows):
        busy, source = max(col("seconds/engine_busy")), "seconds/engine_busy"  # cumulative
    else:
        busy, source = sum(col("seconds/rollout_generate")), "seconds/rollout_generate"
    last = [r for r in rows if r["time"] >= clock.ready_wall + 0.9 * clock.budget_s]
    if len(last) < 3:
        last = rows[-3:]
    out = {
        "samples_per_s": round(trained / wall, 2),
        "generated_per_s": round((trained + sum(dropped.values())) / wall, 2),
        "trainer_idle": round(1 - trainer_busy / wall, 3),
        "engine_idle": round(1 - busy / wall, 3),
        "engine_busy_source": source,
        "staleness_mean": round(sum(r["staleness/mean"] * r["samples/trained"] for r in rows) / max(trained, 1), 3),
        "staleness_max": max(col("staleness/max"), default=0),
        "reward_end": round(sum(r["reward/mean"] for r in last) / max(len(last), 1), 4),
        "eval_accuracy": round(summary["final_accuracy"], 4),
        "steps": len(rows), "trained_samples": int(trained), "dropped": dropped,
        "wall_s": round(wall, 1),
        "worker_startup_s": round(clock.ready_wall - clock.spawned_at, 1) if clock.spawned_at else None,
        "step_s_mean": round(wall / max(len(rows), 1), 3),
    }
    syncs = {k: round(sum(col(f"seconds/{k}")), 2) for k in ("weight_publish", "weight_pull", "weight_drain")
             if any(f"seconds/{k}" in r for r in rows)}
    if syncs:  # where the weight syncs took time, over the run
        out["weight_sync_s"] = syncs
    return out


# ---------------------------------------------------------------------------------------------


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budget-s", type=float, default=90.0, help="RL wall-clock budget of each mode")
    ap.add_argument("--out", default="", help="folder for the runs (default: a new temporary folder)")
    ap.add_argument("--modes", default=",".join(MODES), help="comma-separated subset of " + ",".join(MODES))
    ap.add_argument("--slots", type=int, default=64, help="sandbox slots (and verifier threads)")
    ap.add_argument("--sft-steps", type=int, default=120, help="SFT warm-up steps (shared by every mode)")
    ap.add_argument("--lr", type=float, default=1e-4, help="RL learning rate")
    ap.add_argument("--warmup-from", default="", help="reuse the warm-up of an earlier --out (same --sft-steps)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                    help="a config override for every run (repeatable), e.g. --set algorithm.advantage=grpo")
    args = ap.parse_args()
    modes = [m for m in args.modes.split(",") if m]
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        ap.error(f"unknown mode {unknown[0]} (known: {', '.join(MODES)})")
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="tempering-bench-async-"))
    out.mkdir(parents=True, exist_ok=True)
    if any((out / name).exists() for name in ("warmup", *modes)):
        ap.error(f"{out} already holds runs of this bench; give another --out")
    log(f"runs go to {out}")

    # Everything the runs print goes to stderr (spawned workers inherit the descriptor); the
    # JSON report alone goes to the real stdout.
    report_to = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)

    base = base_overrides(out, args.slots, args.seed, args.lr) + [f"--{item}" for item in args.set]
    t0 = time.monotonic()
    warm_cfg = load_config(None, base + MODEL + ["--run.name=warmup", "--run.steps=0", f"--sft.steps={args.sft_steps}",
                                                 "--sft.lr=1e-3", "--sft.batch_size=64"])
    warm_dir = Path(args.warmup_from) / "warmup" if args.warmup_from else out / "warmup"
    if not args.warmup_from:
        run_train(warm_cfg, None, None)
    baseline = EvalResult(**json.loads((warm_dir / "eval_baseline.json").read_text()))
    model_path = warm_dir / "checkpoints" / "step-000000" / "model"
    log(f"warm-up{' (reused from ' + str(warm_dir) + ')' if args.warmup_from else ''}: {args.sft_steps} SFT steps, "
        f"held-out accuracy {baseline.accuracy:.3f} ({time.monotonic() - t0:.0f} s)")

    report: dict[str, Any] = {
        "budget_s": args.budget_s, "slots": args.slots, "sft_steps": args.sft_steps, "lr": args.lr,
        "baseline": {"eval_accuracy": round(baseline.accuracy, 4), **heldout_reward(model_path, warm_cfg)},
        "modes": {}, "notes": []}
    for name in modes:
        k, partial = MODES[name]
        if partial and not HAS_PARTIAL:
            report["notes"].append(f"{name} skipped: this tempering has no rollout.partial_rollouts")
            log(report["notes"][-1])
            continue
        extra = [f"--run.name={name}", f"--model.path={json.dumps(str(model_path))}", "--sft.steps=0",
                 f"--buffer.max_staleness={k}", f"--buffer.queue_size={k + 1}"]
        if HAS_PARTIAL:
            extra.append(f"--rollout.partial_rollouts={'true' if partial else 'false'}")
        cfg = load_config(None, base + extra)
        clock = Clock(args.budget_s)
        log(f"{name}: max_staleness={k} queue_size={k + 1}"
            + (f" partial_rollouts={str(partial).lower()}" if HAS_PARTIAL else "") + f", {args.budget_s:g} s")
        with CpuMeter() as cpu:
            summary = run_train(cfg, clock, baseline)
        result = {**summarize(out / name, clock, summary),
                  **heldout_reward(latest_checkpoint(out / name) / "model", cfg), **cpu.result}
        report["modes"][name] = result
        log(f"{name}: {json.dumps(result)}")
    report.update(conclusions(report["modes"]))
    report["out"] = str(out)
    report["total_s"] = round(time.monotonic() - t0, 1)
    report_to.write(json.dumps(report, indent=2) + "\n")
    report_to.flush()


def conclusions(got: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The best async mode against sync, and what each mechanism added (ratios of samples_per_s)."""
    def ratio(a: str, b: str) -> float | None:
        return round(got[a]["samples_per_s"] / got[b]["samples_per_s"], 2) if a in got and b in got else None

    out: dict[str, Any] = {}
    asyncs = [m for m in got if m != "sync"]
    if "sync" in got and asyncs:
        best = max(asyncs, key=lambda m: got[m]["samples_per_s"])
        out["best_mode"] = best
        out["speedup_best_vs_sync"] = ratio(best, "sync")
        # the held-out reward is the comparison that counts; reward_end compares different
        # batches (each mode ends at another one), eval_accuracy is exact greedy answers only
        out["reward_not_lower"] = {key: got[best][key] >= got["sync"][key]
                                   for key in ("heldout_reward", "eval_accuracy", "reward_end")}
    out["contributions"] = {
        "overlap": ratio("overlap", "sync"),  # one-step overlap over sync
        "staleness_1_to_2": ratio("async_k2", "overlap"),
        "staleness_2_to_4": ratio("async_k4", "async_k2"),
        "partial_rollouts": ratio("async_k4_partial", "async_k4"),  # at k = 4
    }
    return out


if __name__ == "__main__":
    main()
