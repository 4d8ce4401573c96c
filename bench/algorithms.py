"""The demo under each algorithm family: does it learn, from the same SFT warm-up?

Runs the demo (`configs/demo.toml`: SFT warm-up, then asynchronous RL on the four demo domains)
once per variant, one after another, each as the CLI runs it (`tempering train`), and reads each
run's `summary.json`:
- `grpo`: the demo as shipped (GRPO advantages, PPO's clipped objective, GRPO's aggregation);
- `ppo`: PPO with a value model (`algorithm.advantage = "gae"`: the trainer keeps a critic);
- `dapo`: DAPO (token-mean aggregation, clip-higher, dynamic sampling); `dapo_overlong` adds
  its overlong shaping, which the demo's budget-filling answers are the wrong place for;
- `gspo`, `cispo`, `reinforce_pp`: the other objectives and the batch-normalised advantage.
Every variant starts from the same seed, so from the same warm-up and the same baseline.
Prints one JSON object: per variant `baseline_accuracy`, `final_accuracy`, `ratio` (final /
baseline), `learns` (final above baseline), `wall_s`, and the overrides it ran with.
Usage: python bench/algorithms.py [--variants ppo,dapo] [--steps 800] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

VARIANTS = {
    "grpo": [],
    "ppo": ["--algorithm.advantage=gae"],
    # no overlong shaping: the demo's answers fill its 20-token budget by design (a sorted list is
    # as long as the list), and a buffer of 4 punished right answers (sorting fell to 0)
    "dapo": ["--algorithm.aggregation=token_mean", "--algorithm.clip_low=0.2", "--algorithm.clip_high=0.28",
             "--buffer.dynamic_sampling=16"],
    "dapo_overlong": ["--algorithm.aggregation=token_mean", "--algorithm.clip_low=0.2", "--algorithm.clip_high=0.28",
                      "--algorithm.overlong_buffer=4", "--buffer.dynamic_sampling=16"],
    "gspo": ["--algorithm.loss=gspo"],
    "cispo": ["--algorithm.loss=cispo"],
    "reinforce_pp": ["--algorithm.advantage=reinforce_pp_baseline"],
}


def run(name: str, overrides: list[str], steps: int, out: Path) -> dict:
    cmd = [sys.executable, "-m", "tempering.cli", "train", "--config", "configs/demo.toml", f"--run.dir={out}",
           f"--run.name={name}", f"--run.steps={steps}", "--metrics.progress=false", *overrides]
    print(f"[bench] {name}: {' '.join(overrides) or '(the demo as shipped)'}", file=sys.stderr, flush=True)
    t0 = time.monotonic()
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if r.returncode != 0:
        return {"overrides": overrides, "error": r.stderr[-2000:]}
    summary = json.loads((out / name / "summary.json").read_text())
    base, final = summary["baseline_accuracy"], summary["final_accuracy"]
    return {"overrides": overrides, "baseline_accuracy": base, "final_accuracy": final,
            "ratio": final / base if base else None, "learns": final > base,
            "final_per_domain": summary["final_per_domain"], "wall_s": round(time.monotonic() - t0, 1)}


def compare(variants: dict[str, list[str]], default: str, steps: int, label: str, doc: str, after=None) -> None:
    """Parse the command line, run the chosen variants one after another, print one JSON object
    (`after(name, run_dir)` adds figures of its own to each run's entry)."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument(f"--{label}", default=default, help=f"comma-separated, of: {', '.join(variants)}")
    ap.add_argument("--steps", type=int, default=steps, help="RL steps of each run")
    ap.add_argument("--out", type=Path, default=None, help="where the runs go (default: a temporary folder)")
    args = ap.parse_args()
    names = [v for v in getattr(args, label).split(",") if v]
    unknown = [v for v in names if v not in variants]
    if unknown:
        sys.exit(f"--{label}: unknown {unknown[0]!r} (known: {', '.join(variants)})")
    out = args.out or Path(tempfile.mkdtemp(prefix=f"tempering-{label}-"))
    results = {}
    for name in names:
        results[name] = run(name, variants[name], args.steps, out)
        if after is not None and "error" not in results[name]:
            results[name].update(after(name, out / name))
        print(f"[bench] {name}: {json.dumps(results[name])}", file=sys.stderr, flush=True)
    print(json.dumps({"steps": args.steps, label: results, "run_dir": str(out)}, indent=2))


def main() -> None:
    compare(VARIANTS, "ppo,dapo", 800, "variants", __doc__)


if __name__ == "__main__":
    main()
