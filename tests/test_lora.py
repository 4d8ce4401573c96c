"""LoRA adapters (tempering.models.lora) against PEFT on the same tiny Llama: the same logits at
initialisation (the base's) and after setting the adapters, the same gradients of one step, the
merged weights giving the adapted logits, PEFT loading what `save_peft` writes, and the adapters
off giving the base back."""

from __future__ import annotations

import json

import pytest
import torch

from tempering.models import load_hf, save_hf
from tempering.models.lora import Merged, adapters, adapters_off, apply_lora, load_peft, save_peft

transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")

TARGETS = ("q_proj", "v_proj", "gate_proj", "down_proj")


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("lora")
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=61, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                   tie_word_embeddings=False)
    transformers.LlamaForCausalLM(cfg).save_pretrained(str(root))
    return root


def theirs(folder, ours):
    """PEFT's model of the same base with the same adapters as `ours`."""
    hf = transformers.AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32)
    config = peft.LoraConfig(r=4, lora_alpha=8, target_modules=list(TARGETS), lora_dropout=0.0)
    model = peft.get_peft_model(hf, config)
    with torch.no_grad():
        for name, m in adapters(ours).items():
            layer = model.base_model.model.get_submodule(name)
            layer.lora_A["default"].weight.copy_(m.lora_A)
            layer.lora_B["default"].weight.copy_(m.lora_B)
    return model


def test_adapters_start_at_the_base_and_match_peft(folder):
    base = load_hf(folder)
    ours = load_hf(folder)
    names = apply_lora(ours, rank=4, alpha=8, targets=TARGETS, seed=1)
    assert len(names) == 2 * len(TARGETS)
    assert {n for n, p in ours.named_parameters() if p.requires_grad} == {f"{n}.lora_{x}" for n in names for x in "AB"}
    ids = torch.randint(0, 61, (3, 11), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.equal(ours(ids), base(ids))  # B is zero: exactly the base
        for m in adapters(ours).values():
            m.lora_B.normal_(0, 0.1)
        with adapters_off(ours):
            assert torch.equal(ours(ids), base(ids))
        adapted = ours(ids)
        assert (adapted - base(ids)).abs().max() > 1e-3
    model = theirs(folder, ours)
    with torch.no_grad():
        torch.testing.assert_close(model(input_ids=ids).logits, adapted, atol=1e-5, rtol=0)

    # one step's gradients: the same loss on the same batch, in both
    def loss(logits):
        return -torch.log_softmax(logits[:, :-1], -1).gather(-1, ids[:, 1:, None]).mean()

    loss(ours(ids)).backward()
    loss(model(input_ids=ids).logits).backward()
    for name, m in adapters(ours).items():
        layer = model.base_model.model.get_submodule(name)
        torch.testing.assert_close(m.lora_A.grad, layer.lora_A["default"].weight.grad, atol=1e-6, rtol=1e-4)
        torch.testing.assert_close(m.lora_B.grad, layer.lora_B["default"].weight.grad, atol=1e-6, rtol=1e-4)
        assert m.lora_A.grad.abs().max() > 0 and m.base.weight.grad is None


def test_merged_weights_and_peft_files(folder, tmp_path):
    ours = load_hf(folder)
    apply_lora(ours, rank=4, alpha=8, targets=TARGETS, seed=2)
    with torch.no_grad():
        for m in adapters(ours).values():
            m.lora_B.normal_(0, 0.1)
    ids = torch.randint(0, 61, (2, 9), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        adapted = ours(ids)
    save_hf(Merged(ours), tmp_path / "merged")  # what a checkpoint's model/ holds
    assert set(json.loads((tmp_path / "merged" / "config.json").read_text())) >= {"hidden_size", "vocab_size"}
    with torch.no_grad():
        torch.testing.assert_close(load_hf(tmp_path / "merged")(ids), adapted, atol=1e-5, rtol=0)
    save_peft(ours, tmp_path / "adapter", base=str(folder))
    hf = transformers.AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32)
    loaded = peft.PeftModel.from_pretrained(hf, str(tmp_path / "adapter"))
    with torch.no_grad():
        torch.testing.assert_close(loaded(input_ids=ids).logits, adapted, atol=1e-5, rtol=0)
    again = load_hf(folder)
    apply_lora(again, rank=4, alpha=8, targets=TARGETS, seed=3)
    load_peft(again, tmp_path / "adapter")
    with torch.no_grad():
        assert torch.equal(again(ids), adapted)


def test_a_lora_run_trains_adapters_checkpoints_them_and_resumes(tmp_path):
    """2 RL steps of the demo's mix with trainer.lora_rank, then one more after --resume: the
    base is kept as it was, each checkpoint holds the merged model and the adapters (PEFT's
    layout), and the resumed run starts from them."""
    import subprocess

    from run_helpers import ROOT, train_command

    run = tmp_path / "lora"
    lora = ["--run.name=lora", "--trainer.lora_rank=4", "--trainer.lora_alpha=8", "--algorithm.kl_coef=0.01",
            "--run.checkpoint_every=2", "--sft.steps=5"]
    first = subprocess.run(train_command(tmp_path, "--run.steps=2", *lora), cwd=ROOT, capture_output=True, text=True,
                           timeout=600)
    assert first.returncode == 0, first.stderr[-3000:]
    step2 = run / "checkpoints" / "step-000002"
    assert (step2 / "adapter" / "adapter_model.safetensors").is_file() and (step2 / "adapter" / "adapter_config.json").is_file()
    base, merged = load_hf(run / "base"), load_hf(step2 / "model")
    ids = torch.randint(0, base.arch.vocab_size, (2, 7), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert (base(ids) - merged(ids)).abs().max() > 0  # the adapters learned something
    adapted = load_hf(run / "base")
    apply_lora(adapted, rank=4, alpha=8, targets=json.loads((step2 / "adapter" / "adapter_config.json").read_text())[
        "target_modules"])
    load_peft(adapted, step2 / "adapter")
    with torch.no_grad():
        torch.testing.assert_close(adapted(ids), merged(ids), atol=1e-5, rtol=0)  # model/ is base + adapters
    again = subprocess.run(train_command(tmp_path, "--run.steps=3", "--resume", *lora), cwd=ROOT, capture_output=True,
                           text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    assert (run / "checkpoints" / "latest").read_text() == "step-000003"
    with torch.no_grad():
        assert torch.equal(load_hf(run / "base")(ids), base(ids))  # the base never changes
