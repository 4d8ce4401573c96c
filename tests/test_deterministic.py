"""run.deterministic: two runs of one seed write the same samples.jsonl and the same weights,
byte for byte, on the demo's mix (a sandboxed code domain and a multi-turn tool domain among
them), with a held-out evaluation in between; what it cannot repeat is refused up front."""

from __future__ import annotations

import subprocess

from run_helpers import ROOT, train_command


def test_two_deterministic_runs_are_identical(tmp_path):
    runs = []
    for name in ("a", "b"):
        r = subprocess.run(train_command(tmp_path, f"--run.name={name}", "--run.steps=4", "--eval.every=2",
                                         "--sft.steps=40", "--run.deterministic=true"),
                           cwd=ROOT, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr[-3000:]
        runs.append(tmp_path / name)
    a, b = runs
    samples = (a / "samples.jsonl").read_bytes()
    assert samples.count(b"\n") == 4 * 4 * 4 and samples == (b / "samples.jsonl").read_bytes()
    weights = "checkpoints/step-000004/model/model.safetensors"
    assert (a / weights).read_bytes() == (b / weights).read_bytes()
    assert (a / "eval_step-000002.json").read_text() == (b / "eval_step-000002.json").read_text()


def test_what_it_cannot_repeat_is_refused(tmp_path):
    r = subprocess.run(train_command(tmp_path, "--run.deterministic=true", "--buffer.dynamic_sampling=2"),
                       cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "run.deterministic = true needs" in r.stderr and "buffer.dynamic_sampling" in r.stderr
    assert "Traceback" not in r.stderr
