"""The processes of bench/real_learning.py: the shared warm-up, the two arms and the evaluations.

Each is a process of its own: `tempering train` (the warm-up and Tempering's arm), the TRL worker
in its venv (real_learning_trl.py) and one evaluation per checkpoint (real_learning.py --part
eval). An arm returns its checkpoints as [[rl_seconds, step, adapter folder]] and its counts.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


@dataclass
class Setup:
    """What both arms share."""

    config: str
    model: str
    domains: list[str]
    work: Path
    lr: float
    rank: int
    alpha: float
    group: int
    prompts_per_step: int
    max_tokens: int
    eval_max_tokens: int
    temperature: float
    warmup_steps: int
    threads: int
    quick: bool

    def weights(self) -> str:
        return "{" + ", ".join(f'"{d}" = 1.0' for d in self.domains) + "}"

    def train_cmd(self, name: str, *extra: str) -> list[str]:
        """`tempering train` on the config, its mix cut to the domains, with the bench's sizes;
        the run's own held-out evaluation shrunk to a task per domain (the bench evaluates)."""
        return [sys.executable, "-m", "tempering.cli", "train", "--config", self.config, f"--run.dir={self.work}",
                f"--run.name={name}", f"--tasks.weights={self.weights()}", "--tasks.eval_per_domain=1",
                f"--rollout.tasks_per_step={self.prompts_per_step}", f"--rollout.samples_per_task={self.group}",
                f"--rollout.max_tokens={self.max_tokens}", f"--eval.max_tokens={self.eval_max_tokens}",
                f"--trainer.lr={self.lr}", f"--trainer.lora_rank={self.rank}", f"--trainer.lora_alpha={self.alpha}",
                f"--trainer.warmup_steps={self.warmup_steps}", "--eval.every=0", "--run.max_seconds=0",
                "--metrics.progress=false", "--metrics.tensorboard=false", "--metrics.plot=false", *extra]


def log(msg: str) -> None:
    print(f"[bench/real_learning] {msg}", file=sys.stderr, flush=True)


def _check(proc: subprocess.Popen | subprocess.CompletedProcess, what: str, err: Path) -> None:
    if proc.returncode != 0:
        raise SystemExit(f"bench/real_learning: {what} failed (exit {proc.returncode}):\n{err.read_text()[-3000:]}")


def warm_up(s: Setup) -> str:
    """The SFT warm-up of the config (on the domains only); -> its merged HF folder, the start of both arms."""
    extra = ["--run.steps=0", "--run.checkpoint_every=0"]
    if s.quick:
        extra += ["--sft.steps=1", "--sft.batch_size=2"]
    err = s.work / "warmup.log"
    log("SFT warm-up (shared start)")
    with open(err, "w") as f:
        _check(subprocess.run(s.train_cmd("warmup", *extra), stdout=f, stderr=subprocess.STDOUT), "the warm-up", err)
    return str(s.work / "warmup" / "checkpoints" / "step-000000" / "model")


def tempering_arm(s: Setup, start: str, budget_s: float, name: str) -> dict:
    """`tempering train` from `start` (no SFT) until its steps' seconds pass `budget_s`, then
    SIGINT (the run ends at the step boundary with its final checkpoint)."""
    every = 1 if s.quick else 5
    cmd = s.train_cmd(name, f"--model.path={start}", "--sft.steps=0", "--run.steps=100000",
                      f"--run.checkpoint_every={every}")
    run, err = s.work / name, s.work / f"{name}.log"
    log(f"Tempering arm {name}: lr {s.lr}, {budget_s:g} RL seconds")
    with open(err, "w") as f:
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT)
        stopped = False
        while proc.poll() is None:
            time.sleep(1.0)
            if not stopped and sum(map(_rl_seconds, _rows(run))) >= budget_s:
                proc.send_signal(signal.SIGINT)
                stopped = True
    _check(proc, f"tempering train ({name})", err)
    rows, rl, saves = _rows(run), 0.0, []
    for r in rows:
        rl += _rl_seconds(r)
        adapter = run / "checkpoints" / f"step-{r['step']:06d}" / "adapter"
        if adapter.exists():
            saves.append([rl, r["step"], str(adapter)])
    # every sample a step took in, trained or dropped (a group whose rewards are all equal
    # teaches nothing: Tempering drops it, TRL trains on its zero advantages): as TRL counts
    samples = sum(v for r in rows for k, v in r.items() if k == "samples/trained" or k.startswith("samples/dropped_"))
    return {"saves": saves, "steps": len(rows), "samples": samples, "rl_seconds": rl}


def _rl_seconds(row: dict) -> float:
    """A step's RL seconds: the step, and its checkpoint's write (the rollouts go on meanwhile,
    so it is counted: TRL's adapter saves, a fraction of a second, are not)."""
    return row["seconds/step"] + row.get("seconds/checkpoint", 0.0)


def _rows(run: Path) -> list[dict]:
    """The run's metrics rows so far (a row being rewritten is read next time)."""
    try:
        return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    except (FileNotFoundError, json.JSONDecodeError):
        return []


def trl_arm(s: Setup, start: str, budget_s: float, name: str, saves: int, tasks_file: Path) -> dict:
    """TRL's GRPOTrainer from `start` in its venv, saving the adapters `saves` times over the budget."""
    from real_learning_venv import trl_python

    python = trl_python()
    out = s.work / name
    spec = {"start": start, "tasks": str(tasks_file), "lr": s.lr, "rank": s.rank, "alpha": s.alpha,
            "targets": TARGETS, "group": s.group, "prompts_per_step": s.prompts_per_step, "max_tokens": s.max_tokens,
            "temperature": s.temperature, "warmup_steps": s.warmup_steps, "budget_s": budget_s,
            "save_every_s": budget_s / saves, "threads": s.threads, "config": s.config, "out": str(out)}
    out.mkdir(parents=True, exist_ok=True)
    (out / "spec.json").write_text(json.dumps(spec))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(BENCH)])}
    err = s.work / f"{name}.log"
    log(f"TRL arm {name}: lr {s.lr}, {budget_s:g} RL seconds")
    with open(err, "w") as f:
        _check(subprocess.run([str(python), str(BENCH / "real_learning_trl.py"), str(out / "spec.json")], env=env,
                              stdout=f, stderr=subprocess.STDOUT, cwd=REPO), f"the TRL arm ({name})", err)
    return json.loads((out / "trl.json").read_text())


def evaluate(s: Setup, start: str, adapter: str | None, heldout_file: Path, answers: Path) -> dict:
    """One held-out evaluation in its own process (real_learning.py --part eval)."""
    spec = {"base": start, "adapter": adapter, "heldout": str(heldout_file), "config": s.config,
            "max_tokens": s.eval_max_tokens, "answers": str(answers), "threads": s.threads}
    cmd = [sys.executable, str(BENCH / "real_learning.py"), "--part", json.dumps(spec)]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"bench/real_learning: evaluation of {adapter or start} failed:\n{r.stderr[-3000:]}")
    return json.loads(r.stdout.splitlines()[-1])


def part_eval(spec: dict) -> dict:
    import torch

    from real_learning_eval import evaluate as run_eval

    torch.set_num_threads(spec["threads"])
    rows = json.loads(Path(spec["heldout"]).read_text())
    got = run_eval(spec["base"], spec["adapter"], rows, spec["config"], spec["max_tokens"], Path(spec["answers"]))
    return {"mean": got["mean"], "per_domain": got["per_domain"]}


def pick(saves: list[list], points: int, budget_s: float) -> list[list]:
    """Up to `points` saves spread over the budget (the nearest past each mark), the last always."""
    if not saves:
        return []
    chosen = []
    for k in range(1, points):
        mark = budget_s * k / points
        past = [x for x in saves if x[0] >= mark and x not in chosen]
        if past and past[0] is not saves[-1]:
            chosen.append(past[0])
    return chosen + [saves[-1]]
