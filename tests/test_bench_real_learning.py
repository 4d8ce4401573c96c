"""bench/real_learning_eval.py, the part of the side-by-side both arms share: its held-out tasks
are held-out-split tasks named by (domain, seed) as `tempering tasks score` draws them, its
training tasks never are, the TRL arm's reward is the verifiers' (hand-computed from the
config's [reward] weights), and the evaluator folds an adapter folder, PEFT's own included,
into the base exactly as the adapted model computes."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from tempering.models import load_hf
from tempering.models.lora import LoRALinear, apply_lora, save_peft
from tempering.oracle import draw
from tempering.pool import TaskDraw, is_heldout
from tempering.tasks import get_domain

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
import real_learning_eval as rle  # noqa: E402

transformers = pytest.importorskip("transformers")
DOMAINS = ["reasoning/gcd", "reasoning/count_bits"]
CONFIG = str(ROOT / "configs" / "smollm2.toml")


def test_heldout_rows_are_heldout_tasks_named_by_domain_and_seed():
    rows = rle.heldout(DOMAINS, 3, 5)
    assert [r["domain"] for r in rows] == [DOMAINS[0]] * 3 + [DOMAINS[1]] * 3
    for r in rows:
        (task,) = draw(get_domain(r["domain"]), 1, r["seed"])  # as `tempering tasks score DOMAIN --seed N`
        assert is_heldout(task) and task.id == r["id"] and task.answer == r["answer"]
    again = rle.heldout(DOMAINS, 3, 5, skip=rows)
    assert not {r["id"] for r in again} & {r["id"] for r in rows}
    for t in rle.training_tasks(DOMAINS, 4, 1):
        task = TaskDraw(t["domain"], None, t["seed"]).make()
        assert not is_heldout(task) and t["messages"][0]["content"] == task.messages[0].content


def test_train_reward_is_the_configs_weighted_verifier_score():
    rows = rle.training_tasks(["reasoning/gcd"], 3, 2)
    tasks = [TaskDraw(r["domain"], None, r["seed"]).make() for r in rows]
    answers = [f"<answer>{tasks[0].answer}</answer>", f"<answer>{int(tasks[1].answer) + 1}</answer>", "no idea"]
    # outcome x 1.0 + format (an <answer> block) x 0.1, configs/smollm2.toml's [reward]
    assert rle.train_reward(rows, answers, CONFIG) == pytest.approx([1.1, 0.1, 0.0])


@pytest.fixture()
def folder(hf_llama_dir):
    return hf_llama_dir[0]  # conftest's tiny random Llama


IDS = torch.tensor([[3, 14, 15, 9, 26, 5, 35]])


def test_merged_model_folds_tempering_adapters_in(folder, tmp_path):
    ours = load_hf(folder)
    apply_lora(ours, 4, 8.0)
    torch.manual_seed(1)
    for m in ours.modules():
        if isinstance(m, LoRALinear):
            torch.nn.init.normal_(m.lora_B, std=0.2)
    save_peft(ours, tmp_path)
    merged = rle.merged_model(str(folder), str(tmp_path))
    assert not any(isinstance(m, LoRALinear) for m in merged.modules())
    with torch.no_grad():
        want, got, base = ours(IDS), merged(IDS), load_hf(folder)(IDS)
    assert (want - base).abs().max() > 1e-2  # the adapters change the logits
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_merged_model_folds_a_peft_save_in_as_the_trl_arm_writes_it(folder, tmp_path):
    peft = pytest.importorskip("peft")
    hf = transformers.AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32)
    config = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "down_proj"], lora_dropout=0.0)
    model = peft.get_peft_model(hf, config)
    torch.manual_seed(2)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(std=0.2)
        want = model(input_ids=IDS).logits
    model.save_pretrained(str(tmp_path))
    with torch.no_grad():
        got, base = rle.merged_model(str(folder), str(tmp_path))(IDS), load_hf(folder)(IDS)
    assert (want - base).abs().max() > 1e-2
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
