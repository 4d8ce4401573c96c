"""`Critic`: PPO's value model, a copy of the policy's body with a scalar value head per token.

Built from the policy as RL starts (so it begins from what the policy knows), with its own AdamW
at a constant `algorithm.value_lr`. `values(input_ids)` is aligned with the trainer's logprobs:
position t is the value of the prefix ending at token t, from which token t+1 is generated. The
value loss and GAE are pure functions in `tempering.algorithms`; this module owns the weights and
`value_backward`, the critic's share of a micro-batch's backward pass.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING

import torch
from torch import nn

from tempering.algorithms.losses import value_loss
from tempering.models import Decoder
from tempering.trainer.micro_batch import Targets

if TYPE_CHECKING:  # packing imports this module
    from tempering.trainer.packing import Layout


class Critic(nn.Module):
    def __init__(self, policy: Decoder):
        super().__init__()
        self.arch = policy.arch
        self.model = copy.deepcopy(policy.model)  # HF's `model.` prefix, as the classifier's body
        for p in self.model.parameters():
            p.requires_grad_(True)
        # Zero-initialised: every value starts at 0, so the first advantages are the returns
        # themselves rather than noise from a random head.
        self.value_head = nn.Linear(self.arch.hidden_size, 1)
        nn.init.zeros_(self.value_head.weight)
        nn.init.zeros_(self.value_head.bias)
        self.register_buffer("inv_freq", policy.inv_freq.detach().clone(), persistent=False)
        like = next(policy.parameters())
        self.value_head.to(like.dtype)
        self.to(like.device)

    def values(self, input_ids: torch.Tensor) -> torch.Tensor:
        """input_ids [N, T] -> values [N, T-1] in fp32 (the last token has no next token)."""
        hidden = self.model(input_ids[:, :-1], self.inv_freq)
        return self.value_head(hidden).squeeze(-1).float()


def critic_optimizer(critic: Critic, lr: float, betas: tuple[float, float], weight_decay: float) -> torch.optim.AdamW:
    return torch.optim.AdamW(critic.parameters(), lr=lr, betas=betas, weight_decay=weight_decay)


def value_backward(critic: Critic, ids: torch.Tensor, rows: torch.Tensor, w: torch.Tensor, targets: Targets,
                   layout: Layout | None, clip: float) -> torch.Tensor:
    """The critic's clipped value loss on one micro-batch (`ids` of its `rows`, shared prompts
    packed by `layout` when given), weighted like the policy's by `w`; backpropagated. -> the loss"""
    assert targets.values is not None and targets.returns is not None
    critic.train()
    t = w.shape[1]
    values = layout.values(critic) if layout is not None else critic.values(ids)
    per_token = value_loss(values, targets.values[rows, :t], targets.returns[rows, :t], clip)
    loss = (per_token * w).sum()
    loss.backward()
    return loss.detach()
