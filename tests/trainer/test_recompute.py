"""trainer.gradient_checkpointing: the same gradients as without it (full model and LoRA), with
fewer activations kept for the backward pass (counted by autograd's saved-tensor hooks)."""

from __future__ import annotations

import copy

import pytest
import torch

from tempering.models import Arch, build_model
from tempering.models.lora import apply_lora
from tempering.trainer.packing import token_logprobs
from tempering.trainer.recompute import recompute_blocks

ARCH = Arch(vocab_size=53, hidden_size=32, intermediate_size=64, num_hidden_layers=3, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=64)


def grads_and_saved(model, ids):
    saved = []

    def keep(t):
        saved.append(t.numel() * t.element_size())
        return t

    with torch.autograd.graph.saved_tensors_hooks(keep, lambda t: t):
        logp, _ = token_logprobs(model, ids)
        loss = -logp.mean()
    loss.backward()
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}, sum(saved)


@pytest.mark.parametrize("lora", [False, True])
def test_recomputed_blocks_give_the_same_gradients_and_keep_less(lora):
    plain = build_model(ARCH, seed=0)
    if lora:
        apply_lora(plain, rank=4, alpha=8, seed=1)
        with torch.no_grad():
            for n, p in plain.named_parameters():
                if n.endswith("lora_B"):
                    p.normal_(0, 0.1)
    recomputed = copy.deepcopy(plain)
    recompute_blocks(recomputed)
    ids = torch.randint(0, ARCH.vocab_size, (4, 40), generator=torch.Generator().manual_seed(0))
    want, kept_plain = grads_and_saved(plain, ids)
    got, kept_recomputed = grads_and_saved(recomputed, ids)
    assert want.keys() == got.keys() and want
    for name in want:
        torch.testing.assert_close(got[name], want[name], atol=1e-6, rtol=1e-5)
    assert kept_recomputed < kept_plain / 2, (kept_recomputed, kept_plain)
    with torch.no_grad():  # no recording: the plain forward
        assert torch.equal(recomputed(ids), plain(ids))
