"""Advantages: rewards of the samples of a batch -> one advantage per sample (or per token, GAE).

Sample-level advantages are pure functions `fn(rewards [N], group_ids [N]) -> [N]` over the
whole batch, so group-relative ones (GRPO, Dr. GRPO, RLOO) normalise within each group and
batch-level ones (REINFORCE++) over every sample; groups may differ in size after failed or stale
samples are dropped. `gae` is per token and needs a value model: the buffer leaves it to the
trainer, which calls `gae(...)` with its critic's values. This module holds no state and knows
nothing of the buffer or the trainer; reward shaping (overlong) is in `shaping.py`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from tempering.errors import UserError

Advantage = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # rewards [N], group_ids [N] -> [N]

EPS = 1e-6


def _per_group(rewards: torch.Tensor, group_ids: torch.Tensor,
               one: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
    """Apply `one` (rewards of one group [n] -> [n]) to each group of the batch."""
    out = torch.zeros_like(rewards)
    for g in torch.unique(group_ids):
        rows = group_ids == g
        out[rows] = one(rewards[rows])
    return out


def _std(x: torch.Tensor) -> torch.Tensor:
    """Unbiased std, as DeepSeekMath's GRPO; 0 for fewer than two values (never NaN)."""
    return x.std() if x.numel() > 1 else torch.zeros((), dtype=x.dtype)


def grpo(rewards: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """Per group: (r - mean) / (std + eps), std unbiased.
    One group [1, 0, 0, 1]: mean 0.5, std 0.5774 -> [0.866, -0.866, -0.866, 0.866]."""
    return _per_group(rewards, group_ids, lambda r: (r - r.mean()) / (_std(r) + EPS))


def drgrpo(rewards: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """Dr. GRPO, per group: r - mean, no std division (it up-weights near-uniform groups).
    One group [1, 0, 0, 1] -> [0.5, -0.5, -0.5, 0.5]."""
    return _per_group(rewards, group_ids, lambda r: r - r.mean())


def rloo(rewards: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """Leave-one-out, per group: r_i - mean of the others; 0 for a group of one.
    One group [1, 0, 0] -> [1, -0.5, -0.5]."""
    def one(r: torch.Tensor) -> torch.Tensor:
        n = r.numel()
        return torch.zeros_like(r) if n < 2 else r - (r.sum() - r) / (n - 1)
    return _per_group(rewards, group_ids, one)


def reinforce_pp(rewards: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """REINFORCE++: (r - batch mean) / (batch std + eps); groups play no part.
    Batch [1, 0, 0, 0]: mean 0.25, std 0.5 -> [1.5, -0.5, -0.5, -0.5]."""
    return (rewards - rewards.mean()) / (_std(rewards) + EPS)


def reinforce_pp_baseline(rewards: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """REINFORCE++ with a group baseline: r - its group's mean, then divided by the batch std
    of those differences (which average 0 over the batch, so this is whitening).
    Groups [1, 0] and [0.5, 0.5]: differences [0.5, -0.5, 0, 0], std sqrt(1/6) = 0.408
    -> [1.2247, -1.2247, 0, 0]."""
    centred = _per_group(rewards, group_ids, lambda r: r - r.mean())
    return centred / (_std(centred) + EPS)


ADVANTAGES: dict[str, Advantage] = {"grpo": grpo, "drgrpo": drgrpo, "rloo": rloo, "reinforce_pp": reinforce_pp,
                                    "reinforce_pp_baseline": reinforce_pp_baseline}
# Advantages that are 0 for a group of one (the buffer drops such a sample as "alone").
GROUP_RELATIVE = frozenset({"grpo", "drgrpo", "rloo", "reinforce_pp_baseline"})
TRAINER_ADVANTAGES = ("gae",)  # computed by the trainer from its value model
ADVANTAGE_NAMES = (*ADVANTAGES, *TRAINER_ADVANTAGES)


@dataclass(frozen=True)
class AdvantageSpec:
    """What the buffer needs to know of the configured advantage."""

    name: str
    fn: Advantage | None  # None: the trainer computes advantages per token (gae)
    group_relative: bool  # a group of one has no signal


def get_advantage(name: str) -> AdvantageSpec:
    if name not in ADVANTAGE_NAMES:
        raise UserError(f"algorithm.advantage: unknown {name!r} (known: {', '.join(sorted(ADVANTAGE_NAMES))})")
    return AdvantageSpec(name, ADVANTAGES.get(name), name in GROUP_RELATIVE)


# ---------------------------------------------------------------------------------------------
# Per-token advantages with a value model (PPO)


def last_token_rewards(rewards: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """rewards [N], mask [N, T] -> [N, T]: each reward on its row's last masked token (the
    outcome arrives when the sample ends); a fully masked row gets none.
    rewards [2, 5], mask [[1, 1, 0], [0, 0, 0]] -> [[0, 2, 0], [0, 0, 0]]."""
    t = mask.shape[1]
    last = (torch.arange(t, device=mask.device) * (mask > 0)).argmax(-1)  # 0 for an empty row
    out = torch.zeros_like(mask, dtype=rewards.dtype)
    out[torch.arange(mask.shape[0]), last] = rewards * (mask.sum(-1) > 0)
    return out


def gae(token_rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gamma: float,
        lam: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation over the masked tokens of each row.

    token_rewards, values, mask [N, T] -> advantages, returns [N, T] (0 where mask is 0).
    delta_t = r_t + gamma V_next - V_t, A_t = delta_t + gamma lam A_next, returns = A + V; the
    episode ends after the row's last masked token (V_next = 0 there). Unmasked tokens inside a
    row (tool output) are skipped: the next model token's value is the next state's.
    Worked example, one row, mask [1, 1, 1], rewards [0, 0, 1], values [0.5, 0.6, 0.7],
    gamma 0.9, lam 0.5: deltas [0.9*0.6 - 0.5, 0.9*0.7 - 0.6, 1 - 0.7] = [0.04, 0.03, 0.3];
    A = [0.04 + 0.45*0.165, 0.03 + 0.45*0.3, 0.3] = [0.11425, 0.165, 0.3].
    """
    n, t = mask.shape
    adv = torch.zeros_like(values)
    next_value = torch.zeros(n, dtype=values.dtype, device=values.device)
    next_adv = torch.zeros_like(next_value)
    for i in reversed(range(t)):
        m = mask[:, i] > 0
        delta = token_rewards[:, i] + gamma * next_value - values[:, i]
        a = delta + gamma * lam * next_adv
        adv[:, i] = torch.where(m, a, torch.zeros_like(a))
        next_value = torch.where(m, values[:, i], next_value)
        next_adv = torch.where(m, a, next_adv)
    return adv, (adv + values) * (mask > 0)


def whiten(x: torch.Tensor, mask: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """(x - mean) / (std + eps) over the masked entries (population std); 0 elsewhere.
    x [[1, 3, 9]], mask [[1, 1, 0]]: mean 2, std 1 -> [[-1, 1, 0]]."""
    m = mask > 0
    if not m.any():
        return torch.zeros_like(x)
    vals = x[m]
    mean, std = vals.mean(), vals.std(unbiased=False)
    return torch.where(m, (x - mean) / (std + eps), torch.zeros_like(x))
