"""Tempering against TRL's GRPOTrainer on a real model and real domains: one JSON object.

    .venv/bin/python bench/real_learning.py [--out FILE.json] [--budget-s 1800] [--sweep] [--quick]

SmolLM2-135M-Instruct (configs/smollm2.toml) on the config's reasoning/* domains, single-turn,
both arms alike:
- the same start: the config's SFT warm-up, run once (`tempering train --run.steps=0` on these
  domains, or `--start FOLDER`), whose merged HF folder both arms put fresh LoRA adapters on;
- the same LoRA rank and alpha on the same 7 projections, learning rate (`--lr`, default the
  config's, or the one `--sweep` picks), warm-up steps, group size (samples per task), prompts per
  step, sampling temperature and max tokens, and the same reward (the config's [reward] by
  `oracle.Scorer`: the verifiers training uses);
- the same RL budget (`--budget-s` seconds of RL, set-up not counted: Tempering's steps'
  `seconds/step` and checkpoint writes summed, stopped by SIGINT at a step boundary; TRL's wall
  time from its first step, its adapter saves left out); each arm ends at the first step
  boundary past the budget, so its last point may lie up to a step beyond it;
- the same held-out set: `--heldout-per-domain` tasks of each domain (>= 200 in all by default)
  drawn once with `--seed` and saved next to the JSON (`<out>.heldout.json`, each task named by
  domain and seed as `tempering tasks score` names it), and one evaluator for every checkpoint
  of both arms (real_learning_eval.evaluate: the adapters folded into the start, greedy, scored
  as `tempering tasks score` scores; each checkpoint's answers kept as an `--answers` file).

Tempering runs `tempering train` with the config and overrides (async, LoRA, bfloat16 rollouts:
its own settings); its curve is its run directory's checkpoints (`checkpoints/step-N/adapter`)
at the RL seconds of their steps in `metrics.jsonl`. TRL 1.16 runs in a venv of its own that the
bench makes under Tempering's cache (real_learning_venv.py; TRL is no dependency of Tempering),
from real_learning_trl.py, with a callback that saves its adapters at intervals. Both curves get
`--points` evaluations. The config's finance (tools) and files (multi-turn, a sandboxed
workspace) domains are left out of both arms: TRL 1.16 calls tools only as stateless Python
functions shared by every sample, and these domains' tools act on each task's own workspace in
Tempering's sandbox; bridging them would be a second implementation of the domains, not TRL's.

`--sweep` first runs both arms for `--sweep-budget-s` at each of `--sweep-lrs`, scores their last
adapters on a set of held-out-split tasks apart from the held-out set, and takes the LR with the
best mean of the two arms (reported under "sweep"). `--quick` is a smoke run of every path
(minutes; its numbers mean nothing). The JSON: {"model", "domains", "baseline": {domain: acc},
"tempering": {"curve": [[rl_seconds, acc]], "final": {domain: acc}, "samples_per_s"}, "trl": {the
same}, "seconds_to_trl_final" (the first RL second at which Tempering's curve reaches TRL's final
mean; null if it never does), "settings", "heldout", "sweep"}; a curves PNG beside it.
`samples_per_s` counts the samples generated, scored and taken into a step, trained on or not
(Tempering drops a group whose rewards are all equal; TRL trains on its zero advantages), over
RL seconds. Each arm's first step holds its one-time start costs.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH.parent))
sys.path.insert(0, str(BENCH))

from real_learning_arms import Setup, evaluate, log, part_eval, pick, tempering_arm, trl_arm, warm_up  # noqa: E402


def parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default=str(BENCH.parent / "configs" / "smollm2.toml"))
    ap.add_argument("--out", default=str(Path(tempfile.gettempdir()) / "real_learning.json"))
    ap.add_argument("--budget-s", type=float, default=1800.0, help="RL seconds per arm")
    ap.add_argument("--lr", type=float, help="both arms' learning rate (default: the config's trainer.lr)")
    ap.add_argument("--sweep", action="store_true", help="pick the LR first by short runs of both arms")
    ap.add_argument("--sweep-lrs", default="1e-5,5e-5,2e-4")
    ap.add_argument("--sweep-budget-s", type=float, default=300.0)
    ap.add_argument("--heldout-per-domain", type=int, default=50)
    ap.add_argument("--points", type=int, default=6, help="evaluated checkpoints per arm")
    ap.add_argument("--seed", type=int, default=20261207, help="the held-out draw")
    ap.add_argument("--start", help="an HF folder both arms start from (default: the config's warm-up, run here)")
    ap.add_argument("--work", help="the runs' folder (default: a temporary one, removed)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--quick", action="store_true", help="a smoke run of every path")
    ap.add_argument("--part", help=argparse.SUPPRESS)
    return ap.parse_args()


def setup(args: argparse.Namespace, work: Path) -> Setup:
    from tempering.config import load_config

    cfg = load_config(args.config)
    domains = [d for d in cfg.tasks.weights if d.startswith("reasoning/")]
    q = args.quick
    return Setup(config=args.config, model=cfg.model.path, domains=domains, work=work, lr=args.lr or cfg.trainer.lr,
                 rank=cfg.trainer.lora_rank, alpha=cfg.trainer.lora_alpha,
                 group=2 if q else cfg.rollout.samples_per_task, prompts_per_step=1 if q else cfg.rollout.tasks_per_step,
                 max_tokens=16 if q else cfg.rollout.max_tokens, eval_max_tokens=16 if q else cfg.eval.max_tokens,
                 temperature=cfg.rollout.temperature, warmup_steps=cfg.trainer.warmup_steps, threads=args.threads,
                 quick=q)


def arm_result(s: Setup, start: str, run: dict, baseline: dict, heldout: Path, points: int, budget_s: float,
               tag: str) -> dict:
    """An arm's curve: (0, baseline) and its picked checkpoints, each evaluated."""
    curve, last = [[0.0, baseline["mean"]]], baseline
    for rl, step, adapter in pick(run["saves"], points, budget_s):
        log(f"evaluating {tag} at {rl:.0f} RL seconds (step {step})")
        last = evaluate(s, start, adapter, heldout, s.work / f"answers-{tag}-{step:05d}.jsonl")
        curve.append([round(rl, 1), last["mean"]])
    return {"curve": curve, "final": last["per_domain"],
            "samples_per_s": run["samples"] / run["rl_seconds"] if run["rl_seconds"] else 0.0,
            "steps": run["steps"], "rl_seconds": run["rl_seconds"]}


def sweep(s: Setup, start: str, args: argparse.Namespace, heldout_rows: list[dict], tasks_file: Path) -> dict:
    """Each LR, both arms for the sweep budget, scored on held-out-split tasks apart from the held-out set."""
    from real_learning_eval import heldout

    rows = heldout(s.domains, 2 if args.quick else 10, args.seed + 1, skip=heldout_rows)
    sweep_file = s.work / "sweep_tasks.json"
    sweep_file.write_text(json.dumps(rows))
    out: dict = {"budget_s": args.sweep_budget_s, "tasks": len(rows), "tempering": {}, "trl": {}}
    base_lr = s.lr
    for lr in [float(x) for x in args.sweep_lrs.split(",")]:
        s.lr = lr
        for arm, run in (("tempering", tempering_arm(s, start, args.sweep_budget_s, f"sweep-tempering-{lr:g}")),
                         ("trl", trl_arm(s, start, args.sweep_budget_s, f"sweep-trl-{lr:g}", 1, tasks_file))):
            got = evaluate(s, start, run["saves"][-1][2], sweep_file, s.work / f"answers-sweep-{arm}-{lr:g}.jsonl")
            out[arm][f"{lr:g}"] = got["mean"]
    s.lr = base_lr
    best = max(out["trl"], key=lambda k: out["trl"][k] + out["tempering"][k])
    out["chosen_lr"] = float(best)
    return out


def seconds_to(curve: list[list[float]], target: float) -> float | None:
    return next((t for t, acc in curve if acc >= target), None)


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for arm in ("tempering", "trl"):
        t, acc = zip(*result[arm]["curve"])
        ax.plot([x / 60 for x in t], acc, marker="o", label=f"{arm} ({result[arm]['samples_per_s']:.2f} samples/s)")
    ax.set_xlabel("RL minutes")
    ax.set_ylabel(f"held-out accuracy ({result['heldout']['tasks']} tasks, greedy)")
    ax.set_title(f"{result['model']}: {', '.join(d.split('/')[-1] for d in result['domains'])}", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> int:
    args = parse()
    if args.part:
        print(json.dumps(part_eval(json.loads(args.part))))
        return 0
    from real_learning_eval import heldout, training_tasks

    out = Path(args.out).absolute()
    work = Path(args.work or tempfile.mkdtemp(prefix="real-learning-")).absolute()
    work.mkdir(parents=True, exist_ok=True)
    s = setup(args, work)
    per_domain = 2 if args.quick else args.heldout_per_domain
    points, budget = (2, 30.0) if args.quick else (args.points, args.budget_s)
    if args.quick:  # one LR: the sweep's path, in minutes
        args.sweep_budget_s, args.sweep_lrs = 20.0, "2e-4"
    rows = heldout(s.domains, per_domain, args.seed)
    heldout_file = out.with_suffix(".heldout.json")
    heldout_file.write_text(json.dumps(rows, indent=0))
    tasks_file = work / "trl_tasks.json"
    tasks_file.write_text(json.dumps(training_tasks(s.domains, 16 if args.quick else 400, args.seed + 2)))
    start = args.start or warm_up(s)
    log("evaluating the start (baseline)")
    baseline = evaluate(s, start, None, heldout_file, work / "answers-baseline.jsonl")
    swept = sweep(s, start, args, rows, tasks_file) if args.sweep else None
    if swept:
        s.lr = swept["chosen_lr"]
    temp = arm_result(s, start, tempering_arm(s, start, budget, "tempering"), baseline, heldout_file, points,
                      budget, "tempering")
    trl = arm_result(s, start, trl_arm(s, start, budget, "trl", points, tasks_file), baseline, heldout_file,
                     points, budget, "trl")
    trl_final = trl["curve"][-1][1]
    result = {"model": s.model, "domains": s.domains, "baseline": baseline["per_domain"],
              "tempering": temp, "trl": trl, "seconds_to_trl_final": seconds_to(temp["curve"], trl_final),
              "settings": {k: v for k, v in vars(s).items() if k not in ("work", "domains", "model")}
              | {"budget_s": budget, "start": args.start or "the config's SFT warm-up"},
              "heldout": {"tasks": len(rows), "seed": args.seed, "file": str(heldout_file)},
              "sweep": swept}
    out.write_text(json.dumps(result, indent=1))
    plot(result, out.with_suffix(".png"))
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
