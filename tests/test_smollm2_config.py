"""configs/smollm2.toml end to end, without SmolLM2's weights: its whole mix (reasoning
generators, finance read with tools, the multi-turn file domain), its LoRA and warm-up settings,
on a tiny random Llama with a ChatML tokenizer built here whose template, like SmolLM2's, prints
no tools. Two RL steps: the SFT warm-up replays the finance references' calls as hermes
<tool_call>s through the template, every domain is evaluated and rewarded, the checkpoint holds
the adapters in PEFT's layout and the merged model, and the base stays in the run."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import torch

from tempering.models import load_hf

ROOT = Path(__file__).parent.parent
transformers = pytest.importorskip("transformers")


def test_the_smollm2_mix_trains_two_steps_on_a_tiny_chatml_llama(tmp_path):
    from tokenizer_builders import QWEN2_CONFIG, qwen2_style, write_folder

    from tempering.tokenizer import load_tokenizer

    config = tomllib.loads((ROOT / "configs" / "smollm2.toml").read_text())
    mix = set(config["tasks"]["weights"])
    assert any(d.startswith("reasoning/") for d in mix) and "finance/extraction" in mix
    folder = write_folder(tmp_path / "model", qwen2_style(), QWEN2_CONFIG)
    cfg = transformers.LlamaConfig(vocab_size=load_tokenizer(folder).vocab_size, hidden_size=32, intermediate_size=64,
                                   num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                                   max_position_embeddings=4096, tie_word_embeddings=True)
    torch.manual_seed(0)
    transformers.LlamaForCausalLM(cfg).save_pretrained(folder)
    r = subprocess.run([sys.executable, "-m", "tempering.cli", "train", "--config", "configs/smollm2.toml",
                        f"--model.path={folder}", "--run.steps=2", "--run.max_seconds=0", "--run.checkpoint_every=2",
                        f"--rollout.tasks_per_step={len(mix)}", "--rollout.samples_per_task=2", "--rollout.max_tokens=24",
                        "--eval.max_tokens=24", "--eval.every=0", "--tasks.eval_per_domain=1", "--sft.steps=1",
                        f"--sft.batch_size={2 * len(mix)}", "--tasks.sft_per_domain=4", "--run.threads=1",
                        "--metrics.tensorboard=false", "--metrics.plot=false", "--metrics.progress=false",
                        f"--run.dir={tmp_path}", "--run.name=s"],
                       capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    run = tmp_path / "s"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] == 2 and set(summary["final_per_domain"]) == mix  # every domain evaluated
    sft = [json.loads(line) for line in (run / "sft.jsonl").read_text().splitlines()]
    assert [r["step"] for r in sft] == [1] and sft[0]["seconds"] > 0  # the warm-up ran on the mix's references, the finance calls as hermes through the template
    steps = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [s["step"] for s in steps] == [1, 2]
    rewards = {k.removeprefix("reward/domain/"): v for s in steps for k, v in s.items() if k.startswith("reward/domain/")}
    assert rewards and set(rewards) <= mix and all(0.0 <= v <= 1.1 for v in rewards.values())  # per domain of the mix
    step2 = run / "checkpoints" / "step-000002"
    adapter = json.loads((step2 / "adapter" / "adapter_config.json").read_text())
    assert adapter["r"] == config["trainer"]["lora_rank"] and (step2 / "adapter" / "adapter_model.safetensors").is_file()
    base, merged = load_hf(run / "base"), load_hf(step2 / "model")
    assert base.arch == merged.arch  # the LoRA path: the base kept once, the checkpoint's model merged
