"""The lineage store's cost on the demo's step time: the same short demo run (configs/demo.toml,
its full domain mix, fresh run directory each time) with the store and with it disabled, in
alternation, so load on the machine falls on both alike.

Prints one JSON object: mean seconds per RL step (metrics.jsonl's `seconds/step`, the first step
left out: it includes the worker's start-up) for both, their difference, and the writer thread's
CPU seconds per step (what the store costs the process, whatever the machine's load).
Usage: python bench/lineage.py [--steps 20] [--pairs 2]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

import tempering.train as train_module
from tempering.config import load_config
from tempering.lineage import LineageStore

ARGS = ["--metrics.progress=false", "--metrics.plot=false", "--eval.every=0", "--run.checkpoint_every=0",
        "--tasks.eval_per_domain=8"]


def one_run(steps: int, enabled: bool, root: Path, name: str) -> dict[str, float]:
    stores: list[LineageStore] = []

    def make(run_dir, deadline_s):
        stores.append(LineageStore(run_dir if enabled else None, deadline_s))
        return stores[-1]

    train_module.LineageStore = make
    cfg = load_config("configs/demo.toml", [*ARGS, f"--run.dir={root}", f"--run.name={name}", f"--run.steps={steps}"])
    train_module.train(cfg)
    rows = [json.loads(x) for x in (root / name / "metrics.jsonl").read_text().splitlines()]
    return {"s_per_step": statistics.mean(r["seconds/step"] for r in rows[1:]),
            "writer_cpu_s_per_step": stores[0].writer_cpu_s / steps}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--pairs", type=int, default=2)
    a = p.parse_args()
    on, off = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(a.pairs):
            on.append(one_run(a.steps, True, Path(tmp), f"on{i}"))
            off.append(one_run(a.steps, False, Path(tmp), f"off{i}"))
    with_store = statistics.mean(r["s_per_step"] for r in on)
    without = statistics.mean(r["s_per_step"] for r in off)
    print(json.dumps({"steps": a.steps, "pairs": a.pairs, "s_per_step_with_store": round(with_store, 4),
                      "s_per_step_without": round(without, 4), "difference_s": round(with_store - without, 4),
                      "writer_cpu_s_per_step": round(statistics.mean(r["writer_cpu_s_per_step"] for r in on), 5)}))


if __name__ == "__main__":
    main()
