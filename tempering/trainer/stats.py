"""`StepStats`: what one trainer step reports (RL or SFT), as flat floats; `rl_stats` makes an RL
step's from its sums."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import torch

from tempering.records import Batch
from tempering.trainer.offpolicy import OffPolicyMeter


@dataclass
class StepStats:
    """Flat floats (train.py logs `dataclasses.asdict` of it). NaN means "does not apply" and is
    left out of the metrics: the critic's without gae, the off-policy ones (`OffPolicyStats`'
    fields) when a step has no such tokens."""

    loss: float
    kl_behavior: float  # k3 estimate of KL(current || behaviour policy) on trained tokens
    kl_ref: float  # the configured estimator's KL(current || reference); 0 without a reference model
    entropy: float
    clip_fraction: float  # trained tokens whose ratio is outside the objective's clip range
    grad_norm: float
    tokens: int
    lr: float
    value_loss: float = math.nan  # gae: the critic's loss, aggregated like the policy's
    value_grad_norm: float = math.nan
    is_weight_mean: float = math.nan
    is_weight_p50: float = math.nan
    is_weight_p90: float = math.nan
    is_weight_p99: float = math.nan
    is_weight_max: float = math.nan
    is_truncated: float = math.nan
    logp_gap_current: float = math.nan
    logp_gap_older: float = math.nan
    current_fraction: float = math.nan
    pipeline_bubble: float = math.nan  # pp > 1: the schedule's idle share (`pipeline.bubble_fraction`)


def rl_stats(totals: torch.Tensor, meter: OffPolicyMeter, norms: list[tuple[float, float]], batch: Batch, lr: float,
             critic: bool, **extra: float) -> StepStats:
    """An RL step's stats from its sums over the batch (loss, kl_behavior, kl_ref, entropy, clipped
    tokens, value loss: `Trainer._micro_step`'s), its per-optimizer-step norms (policy, critic) and
    its off-policy meter; `critic`: whether there is a value loss to report."""
    n, k = max(float(batch.loss_mask[:, 1:].sum()), 1.0), len(norms)
    return StepStats(loss=float(totals[0]) / k, kl_behavior=float(totals[1]) / n, kl_ref=float(totals[2]) / n,
                     entropy=float(totals[3]) / n, clip_fraction=float(totals[4]) / n,
                     grad_norm=sum(g for g, _ in norms) / k, tokens=int(n), lr=lr,
                     value_loss=float(totals[5]) / k if critic else math.nan,
                     value_grad_norm=sum(v for _, v in norms) / k, **dataclasses.asdict(meter.result()), **extra)
