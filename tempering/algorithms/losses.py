"""Policy-gradient losses, split into a per-token objective and a token weighting.

A loss is `sum(token_loss * weight)`: `token_loss` is elementwise (the clipped surrogate of PPO,
with the behaviour policy's logprobs as the "old" ones, which is the off-policy correction for
stale samples); `weight` encodes how tokens are aggregated, and is computed once from the whole
batch's mask, so micro-batches sum to exactly the full-batch loss. Shapes: [N, T] throughout.
"""

from __future__ import annotations

from tempering.errors import UserError
from dataclasses import dataclass
from typing import Callable

import torch


def clipped_surrogate(logp: torch.Tensor, old_logp: torch.Tensor, adv: torch.Tensor,
                      clip_low: float, clip_high: float) -> torch.Tensor:
    """-min(r A, clip(r, 1 - low, 1 + high) A) with r = exp(logp - old_logp), per token."""
    ratio = torch.exp(logp - old_logp)
    clipped = ratio.clamp(1 - clip_low, 1 + clip_high)
    return -torch.minimum(ratio * adv, clipped * adv)


def seq_mean_token_mean(mask: torch.Tensor, norm_tokens: int) -> torch.Tensor:
    """GRPO: average tokens within a sequence, then sequences in the batch."""
    per_seq = mask.sum(-1, keepdim=True).clamp(min=1)
    return mask / per_seq / mask.shape[0]


def seq_sum_const(mask: torch.Tensor, norm_tokens: int) -> torch.Tensor:
    """Dr. GRPO: sum tokens of each sequence, divide by a constant (the generation budget) and
    the number of sequences, so long wrong answers are not under-penalised."""
    return mask / float(norm_tokens) / mask.shape[0]


def token_mean(mask: torch.Tensor, norm_tokens: int) -> torch.Tensor:
    """DAPO: every token of the batch weighs the same."""
    return mask / mask.sum().clamp(min=1)


@dataclass(frozen=True)
class LossSpec:
    token_loss: Callable[..., torch.Tensor]
    weighting: Callable[[torch.Tensor, int], torch.Tensor]


LOSSES: dict[str, LossSpec] = {
    "grpo": LossSpec(clipped_surrogate, seq_mean_token_mean),
    "drgrpo": LossSpec(clipped_surrogate, seq_sum_const),
    "dapo": LossSpec(clipped_surrogate, token_mean),
}


def get_loss(name: str) -> LossSpec:
    if name not in LOSSES:
        raise UserError(f"algorithm.loss: unknown {name!r} (known: {', '.join(sorted(LOSSES))})")
    return LOSSES[name]


def k3_kl(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimator of KL(policy || reference): exp(d) - d - 1 with d = ref - logp."""
    d = ref_logp - logp
    return torch.exp(d) - d - 1
