"""Group-relative advantages: rewards of the n samples of a task -> one advantage per sample.

Every function maps rewards [n] (one group) to advantages [n]. Groups may differ in size after
failed or stale samples are removed, so functions take one group at a time.
"""

from __future__ import annotations

from tempering.errors import UserError
from typing import Callable

import torch

Advantage = Callable[[torch.Tensor], torch.Tensor]


def grpo(rewards: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """(r - mean) / (std + eps), std unbiased as in DeepSeekMath's GRPO.
    [1, 0, 0, 1] -> mean 0.5, std 0.5774 -> [0.866, -0.866, -0.866, 0.866]."""
    if rewards.numel() < 2:
        return torch.zeros_like(rewards)
    return (rewards - rewards.mean()) / (rewards.std() + eps)


def drgrpo(rewards: torch.Tensor) -> torch.Tensor:
    """Dr. GRPO: r - mean, no std division (it up-weights near-uniform groups).
    [1, 0, 0, 1] -> [0.5, -0.5, -0.5, 0.5]."""
    return rewards - rewards.mean()


def rloo(rewards: torch.Tensor) -> torch.Tensor:
    """Leave-one-out baseline: r_i - mean of the others. [1, 0, 0] -> [1, -0.5, -0.5]."""
    n = rewards.numel()
    if n < 2:
        return torch.zeros_like(rewards)
    return rewards - (rewards.sum() - rewards) / (n - 1)


ADVANTAGES: dict[str, Advantage] = {"grpo": grpo, "drgrpo": drgrpo, "rloo": rloo}


def get_advantage(name: str) -> Advantage:
    if name not in ADVANTAGES:
        raise UserError(f"algorithm.advantage: unknown {name!r} (known: {', '.join(sorted(ADVANTAGES))})")
    return ADVANTAGES[name]
