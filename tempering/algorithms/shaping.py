"""Reward shaping applied to a sample's reward before advantages: DAPO's overlong penalty.

A pure function of lengths and budgets, and a small record of its settings that the buffer
holds. It does not decide which samples are trained (the buffer does) and knows nothing of
reward components beyond the penalty it returns.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


def overlong_penalty(lengths: torch.Tensor, budgets: torch.Tensor, buffer: int, factor: float) -> torch.Tensor:
    """DAPO's soft overlong punishment, lengths [N], budgets [N] (model tokens) -> penalty [N] <= 0.

    0 up to `budget - buffer` tokens, then linear down to -factor at the budget, and -factor at
    or past it (a truncated sample used the whole budget). `buffer` 0 turns it off.
    Budget 10, buffer 4, factor 1: lengths [6, 7, 8, 10, 12] -> [0, -0.25, -0.5, -1, -1].
    """
    if buffer <= 0 or factor == 0:
        return torch.zeros(lengths.shape, dtype=torch.float32)
    over = (lengths.float() - (budgets.float() - buffer)) / buffer
    return -factor * over.clamp(0.0, 1.0)


@dataclass(frozen=True)
class Overlong:
    """The overlong penalty's settings: `buffer` tokens before `max_tokens` (the rollout's
    budget; a task's own smaller budget wins), `penalty` the factor at the budget."""

    buffer: int = 0
    penalty: float = 1.0
    max_tokens: int = 0

    @property
    def active(self) -> bool:
        return self.buffer > 0 and self.penalty > 0 and self.max_tokens > 0

    def __call__(self, lengths: list[int], task_budget: int) -> list[float]:
        """Penalties of one group's samples, whose task allows `task_budget` model tokens."""
        budget = min(self.max_tokens, task_budget)
        return overlong_penalty(torch.tensor(lengths), torch.full((len(lengths),), budget), self.buffer,
                                self.penalty).tolist()
