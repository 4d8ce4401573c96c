"""A short training run on the terminal domain with a real HF model folder (a tiny random Qwen2,
a locally built BPE tokenizer, Qwen2.5's tool-calling template): episodes in sandbox sessions in
the rollout worker, the hidden tests of each task as the reward, held-out evaluation in the
worker, and every sandbox execution joined to its sample."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from harbor_helpers import needs_sandbox

ROOT = Path(__file__).parent.parent.parent
transformers = pytest.importorskip("transformers")


@needs_sandbox
def test_a_short_run_on_terminal_tasks(tmp_path):
    sys.path.insert(0, str(ROOT / "tests"))
    from tokenizer_builders import QWEN25_CONFIG, qwen2_style, write_folder

    from tempering.tokenizer import load_tokenizer

    folder = write_folder(tmp_path / "model", qwen2_style(), QWEN25_CONFIG)
    cfg = transformers.Qwen2Config(vocab_size=load_tokenizer(folder).vocab_size, hidden_size=32, intermediate_size=64,
                                   num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                                   max_position_embeddings=8192, tie_word_embeddings=True)
    torch.manual_seed(0)
    transformers.Qwen2ForCausalLM(cfg).save_pretrained(folder)
    r = subprocess.run([sys.executable, "-m", "tempering.cli", "train", f"--model.path={folder}", "--sft.steps=0",
                        "--tasks.weights={terminal = 1.0}", "--tasks.eval_per_domain=2", "--run.steps=2",
                        "--rollout.tasks_per_step=2", "--rollout.samples_per_task=2", "--rollout.max_tokens=48",
                        "--eval.max_tokens=48", "--engine.max_seq_len=8192", "--engine.max_batch_size=8",
                        "--sandbox.workers=2", "--metrics.progress=false", "--metrics.tensorboard=false",
                        "--run.threads=1", f"--run.dir={tmp_path}", "--run.name=t"],
                       capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    run = tmp_path / "t"
    fates = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
    assert len(fates) == 2 * 2 * 2 and {f["domain"] for f in fates} == {"terminal"}
    assert all(not f["failed"] for f in fates)  # every sample was verified (a random model scores 0)
    runs = [json.loads(line) for line in (run / "sandbox.jsonl").read_text().splitlines()]
    verified = {(r["batch"], r["sample"]) for r in runs if r.get("batch") is not None and r["turn"] == -1}
    # each training sample's hidden tests ran in the sandbox, tagged with its step and id
    assert {(f["step"], f"{f['task']}/{f['sample']}") for f in fates} <= verified
    assert {r["eval"] for r in runs if r.get("eval")} == {"baseline", "final"}  # evaluation ran in the worker
    assert {r["process"] for r in runs} == {"rollout-0"}  # the trainer process started no sandbox (the one replica did)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] == 2 and set(summary["final_per_domain"]) == {"terminal"}
