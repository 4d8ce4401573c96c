"""`Critic`: PPO's value model, a copy of the policy's body with a scalar value head per token.

Built from the policy as RL starts (so it begins from what the policy knows), with its own AdamW
at a constant `algorithm.value_lr`. `values(input_ids)` is aligned with the trainer's logprobs:
position t is the value of the prefix ending at token t, from which token t+1 is generated. The
value loss and GAE are pure functions in `tempering.algorithms`; this module only owns weights.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from tempering.models import Decoder


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
