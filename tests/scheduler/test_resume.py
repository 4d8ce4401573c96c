"""End to end: a tiny arithmetic run with the curriculum saves the scheduler's state in its
checkpoints, and `--resume` starts from that state (levels, pass rates, weights), not afresh."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parent.parent.parent
TINY = ["--model.hidden_size=32", "--model.intermediate_size=64", "--model.num_hidden_layers=2",
        "--model.num_attention_heads=2", "--model.num_key_value_heads=1", "--run.threads=1",
        "--tasks.eval_per_domain=8", "--tasks.sft_per_domain=64", "--rollout.tasks_per_step=4",
        "--rollout.samples_per_task=4", "--sft.steps=3", "--sft.batch_size=16", "--metrics.progress=false",
        "--metrics.plot=false", "--tasks.weights={arithmetic = 1.0}", "--run.name=cur", "--run.checkpoint_every=2"]


def train(tmp_path, *args):
    r = subprocess.run([sys.executable, "-m", "tempering.cli", "train", "--config", "configs/demo.toml",
                        f"--run.dir={tmp_path}", *TINY, *args], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    rows = [json.loads(line) for line in (tmp_path / "cur" / "metrics.jsonl").read_text().splitlines()]
    return {row["step"]: row for row in rows}


def test_resume_restores_the_curriculum_from_the_checkpoint(tmp_path):
    """The checkpoint's scheduler entry (set here to the top level, 40 solved groups) is what the resumed run shows."""
    rows = train(tmp_path, "--run.steps=4", "--scheduler.window=2", "--scheduler.promote_at=0.01")
    levels = [rows[s]["scheduler/level/arithmetic"] for s in sorted(rows)]
    assert levels == sorted(levels) and set(levels) <= {0.0, 1.0, 2.0}  # levels only move up
    state_path = tmp_path / "cur" / "checkpoints" / "step-000004" / "state.json"
    state = json.loads(state_path.read_text())
    saved = state["scheduler"]["curriculum"]["arithmetic"]
    assert set(saved) >= {"passes", "signals", "level"} and len(saved["passes"]) <= 2  # window 2
    assert {"cost", "usage"} <= set(state["scheduler"])
    # A state a fresh scheduler cannot reach in a step or two: the top level, 40 solved groups
    # without signal. A resume that started afresh would show level 0, a pass rate near 0 and
    # the full weight (fewer than a quarter of a window seen).
    saved.update(level=2, passes=[1.0] * 40, signals=[0.0] * 40, promotions=2)
    state_path.write_text(json.dumps(state))

    rows = train(tmp_path, "--resume", "--run.steps=6", "--scheduler.window=64", "--scheduler.promote_at=1.0")
    assert sorted(rows) == [1, 2, 3, 4, 5, 6]
    first = rows[5]  # at most 8 new groups (2 batches) are in its window besides the 40 restored
    assert first["scheduler/level/arithmetic"] == 2.0
    assert first["scheduler/pass_rate/arithmetic"] >= 40 / 48
    assert first["scheduler/weight/arithmetic"] <= 8 / 48 + 1e-9
    prompts = [json.loads(line)["prompt"] for line in (tmp_path / "cur" / "samples.jsonl").read_text().splitlines()
               if json.loads(line)["step"] >= 4]
    assert prompts and any(re.search(r"\d\d|-", p) for p in prompts)  # top-level tasks, not single-digit sums
