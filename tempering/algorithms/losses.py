"""Per-token loss terms: policy objectives, KL estimators, the importance weight, the value loss.

Every function here is elementwise over [N, T] tensors (GSPO averages over each row's masked
tokens first); none aggregates over tokens: the trainer multiplies by the token weights of
`aggregation.py`, computed once from the whole batch, so micro-batches add up to the batch's
loss. `old_logp` is the ratio's denominator: the behaviour policy's logprobs (the engine's), or
the proximal policy's under decoupled PPO. Nothing here holds state or touches a model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from tempering.errors import UserError


@dataclass(frozen=True)
class PolicyLoss:
    loss: torch.Tensor  # [N, T] per-token loss (to be weighted and summed)
    clipped: torch.Tensor  # [N, T] bool: the ratio is outside the clip range (a metric)


Objective = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, float, float], PolicyLoss]


def _log_ratio(logp: torch.Tensor, old_logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    # Zero outside the mask: padding holds arbitrary logprobs, and exp of them could overflow.
    return (logp - old_logp) * (mask > 0)


def ppo(logp: torch.Tensor, old_logp: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor,
        clip_low: float, clip_high: float) -> PolicyLoss:
    """PPO's clipped surrogate per token, with clip-higher (DAPO): r = exp(logp - old),
    -min(r A, clip(r, 1 - low, 1 + high) A). low 0.2, high 0.28: r = e^0.5 = 1.649, A = 1
    -> -1.28 (clipped); same r, A = -1 -> 1.649 (the min keeps the larger penalty)."""
    ratio = torch.exp(_log_ratio(logp, old_logp, mask))
    clipped = ratio.clamp(1 - clip_low, 1 + clip_high)
    return PolicyLoss(-torch.minimum(ratio * adv, clipped * adv), (ratio < 1 - clip_low) | (ratio > 1 + clip_high))


def gspo(logp: torch.Tensor, old_logp: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor,
         clip_low: float, clip_high: float) -> PolicyLoss:
    """GSPO, token-level gradient form: the sequence ratio s = exp(mean over the row's masked
    tokens of logp - old), s_t = sg(s) * exp(logp_t - sg(logp_t)) (value s, gradient s grad
    logp_t), then PPO's clipped surrogate with s_t (its own small epsilons). A row with token
    log-ratios [0.1, 0.3] has s = e^0.2 = 1.2214 on both tokens; clipped to 1.0004 (high 4e-4)
    for A = 1 -> -1.0004 each."""
    m = mask > 0
    seq = _log_ratio(logp, old_logp, mask).sum(-1, keepdim=True) / m.sum(-1, keepdim=True).clamp(min=1)
    ratio = torch.exp(seq.detach() + (logp - logp.detach()) * m)
    clipped = ratio.clamp(1 - clip_low, 1 + clip_high)
    s = torch.exp(seq.detach())
    out = ((s < 1 - clip_low) | (s > 1 + clip_high)).expand_as(m)
    return PolicyLoss(-torch.minimum(ratio * adv, clipped * adv), out & m)


def cispo(logp: torch.Tensor, old_logp: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor,
          clip_low: float, clip_high: float) -> PolicyLoss:
    """CISPO (MiniMax-M1): -sg(clip(r, 1 - low, 1 + high)) * A * logp. Every token keeps a
    gradient (the clipped weight only scales it). r = e^0.5, A = 1, logp = -0.5, high 0.28
    -> -1.28 * 1 * -0.5 = 0.64."""
    ratio = torch.exp(_log_ratio(logp, old_logp, mask)).detach()
    weight = ratio.clamp(1 - clip_low, 1 + clip_high)
    return PolicyLoss(-weight * adv * logp, (ratio < 1 - clip_low) | (ratio > 1 + clip_high))


OBJECTIVES: dict[str, Objective] = {"ppo": ppo, "gspo": gspo, "cispo": cispo}


def get_objective(name: str) -> Objective:
    if name not in OBJECTIVES:
        raise UserError(f"algorithm.loss: unknown {name!r} (known: {', '.join(sorted(OBJECTIVES))})")
    return OBJECTIVES[name]


def truncated_is_weight(log_w: torch.Tensor, cap: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Importance weight w = exp(log_w) truncated to min(w, cap) (cap 0: untruncated), and
    which entries were truncated. log_w [0, ln 3], cap 2 -> [1, 2], [False, True]."""
    w = torch.exp(log_w)
    if cap <= 0:
        return w, torch.zeros_like(w, dtype=torch.bool)
    return w.clamp(max=cap), w > cap


# ---------------------------------------------------------------------------------------------
# KL to the reference model


def k1(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """logp - ref: unbiased for KL(policy || ref) under policy samples, but can be negative.
    logp -1, ref -2 -> 1."""
    return logp - ref_logp


def k3(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Schulman's k3: exp(d) - d - 1 with d = ref - logp; >= 0, low variance.
    logp -1, ref -2: d = -1 -> e^-1 + 1 - 1 = 0.3679."""
    d = ref_logp - logp
    return torch.exp(d) - d - 1


KL_ESTIMATORS: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {"k1": k1, "k3": k3}


# ---------------------------------------------------------------------------------------------
# The value model's loss (PPO with GAE)


def value_loss(values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor, clip: float) -> torch.Tensor:
    """Clipped value loss per token: 0.5 max((v - R)^2, (v_clip - R)^2) with
    v_clip = old + clamp(v - old, -clip, clip); clip 0: 0.5 (v - R)^2.
    v 1.0, old 0.5, R 0.6, clip 0.2: v_clip 0.7 -> 0.5 max(0.16, 0.01) = 0.08."""
    unclipped = (values - returns) ** 2
    if clip <= 0:
        return 0.5 * unclipped
    v_clip = old_values + (values - old_values).clamp(-clip, clip)
    return 0.5 * torch.maximum(unclipped, (v_clip - returns) ** 2)
