"""A batch's parts as the trainer steps through them: PPO's mini-batches (`mini_batches`, one
optimizer step each), their micro-batches (`micro_batches`, one forward/backward pass each, about
`trainer.micro_batch_tokens` tokens), and each micro-batch's `MicroSlice` of the batch-wide
`Targets` its loss regresses to."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from tempering.records import Batch

if TYPE_CHECKING:
    from tempering.trainer.parallelize import Ranks


@dataclass
class Targets:
    """What the policy and value losses regress to, for the whole batch ([N, T-1], aligned with
    the logprobs)."""

    advantages: torch.Tensor
    values: torch.Tensor | None = None  # the critic's values at the step's start (gae)
    returns: torch.Tensor | None = None
    # decoupled PPO over several mini-batches: the policy's logprobs at the step's start (with
    # one optimizer step each micro-batch's own forward pass is that policy, and this is None)
    proximal: torch.Tensor | None = None


@dataclass
class MicroSlice:
    """A micro-batch's rows of what its loss needs, [n, T-1] each (aligned with its logprobs)."""

    behaviour: torch.Tensor  # the rollout's logprobs
    advantages: torch.Tensor
    mask: torch.Tensor  # trained tokens
    weights: torch.Tensor  # the aggregation's token weights over the optimizer step's rows
    versions: torch.Tensor  # the policy version that sampled each token
    version: int  # the batch's (the trainer's) version
    proximal: torch.Tensor | None  # decoupled PPO's policy at the step's start; None: the pass's own


def micro_slice(batch: Batch, rows: torch.Tensor, width: int, mask: torch.Tensor, weights: torch.Tensor,
                targets: Targets) -> MicroSlice:
    """`rows` of the batch-wide tensors, cut to `width` tokens."""
    t = width - 1
    return MicroSlice(batch.old_logprobs[rows, 1:width], targets.advantages[rows, :t], mask[rows, :t],
                      weights[rows, :t], batch.versions[rows, 1:width], batch.version,
                      None if targets.proximal is None else targets.proximal[rows, :t])


def mini_batches(batch: Batch, count: int) -> list[torch.Tensor]:
    """The batch's groups dealt into `count` parts of rows (a group's rows stay together:
    group-relative advantages and shared prompts span them)."""
    groups = sorted(set(batch.group_ids.tolist()))
    k = min(count, len(groups))
    parts = [set(groups[i::k]) for i in range(k)]
    return [torch.tensor([r for r, g in enumerate(batch.group_ids.tolist()) if g in part]) for part in parts]


def micro_batches(batch: Batch, rows: torch.Tensor | None, tokens: int, sharing: bool,
                  ranks: Ranks | None = None) -> list[torch.Tensor]:
    """`rows` (None: all) grouped by length, each micro-batch padded only to its own longest row
    and holding about `tokens` tokens: padding is compute the backward pass pays for too. With
    shared prompts (`sharing`) the unit is a group (its rows stay together, as one packed row).
    Under `ranks`, this data-parallel rank's share of the units; the other ranks train the rest."""
    lens, groups = batch.seq_lens.tolist(), batch.group_ids.tolist()
    units: dict[int, list[int]] = {}
    for row in rows.tolist() if rows is not None else range(len(lens)):
        units.setdefault(groups[row] if sharing else row, []).append(row)
    cost = {key: packed_length(batch, members, lens) for key, members in units.items()}
    if ranks is not None:
        cost = ranks.deal(cost)
    out, current, count = [], [], 0
    for key in sorted(cost, key=cost.__getitem__):
        if current and (count + 1) * cost[key] > tokens:
            out.append(torch.tensor(current))
            current, count = [], 0
        current += units[key]
        count += 1
    if current:
        out.append(torch.tensor(current))
    return out


def packed_length(batch: Batch, rows: list[int], lens: list[int]) -> int:
    """Tokens through the model for a unit of `rows`: its shared prompt once, then each completion."""
    if len(rows) == 1 or batch.prompt_lens is None:
        return lens[rows[0]]
    prompt = int(batch.prompt_lens[rows[0]])
    return prompt + sum(max(lens[r] - prompt - 1, 0) for r in rows)  # a completion's last token stays out
