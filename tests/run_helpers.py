"""Helpers the end-to-end tests share: the tiny model's train command line."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).parent.parent
VIEW_ARTIFACTS = ROOT / "test-artifacts" / "view"  # the dashboard's browser tests' screenshots
TINY = ["--model.hidden_size=32", "--model.intermediate_size=64", "--model.num_hidden_layers=2",
        "--model.num_attention_heads=2", "--model.num_key_value_heads=1", "--run.threads=1",
        "--tasks.eval_per_domain=8", "--tasks.sft_per_domain=64", "--rollout.tasks_per_step=4",
        "--rollout.samples_per_task=4", "--sft.steps=3", "--sft.batch_size=16", "--metrics.progress=false"]


def train_command(run_dir: Path, *args: str) -> list[str]:
    """`tempering train` of the demo config on the tiny model, in `run_dir`; `args` override."""
    return [sys.executable, "-m", "tempering.cli", "train", "--config", "configs/demo.toml", f"--run.dir={run_dir}",
            *TINY, *args]
