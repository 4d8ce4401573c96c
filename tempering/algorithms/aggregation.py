"""Token weights: how per-token losses are aggregated into one number for the batch.

`weights(mask [N, T], budget) -> [N, T]` with the loss being `sum(token_loss * weights)`. They
are computed once from the whole batch's mask, so micro-batches (slices of rows) add up to the
full-batch loss exactly; a weighting computed per micro-batch would be another loss. Rows with no
masked token get weight 0 everywhere (never NaN). Nothing here sees the losses themselves.
"""

from __future__ import annotations

from typing import Callable

import torch

from tempering.errors import UserError

Aggregation = Callable[[torch.Tensor, int], torch.Tensor]


def token_mean(mask: torch.Tensor, budget: int) -> torch.Tensor:
    """DAPO: every token of the batch weighs the same. mask [[1, 1], [1, 0]] -> 1/3 each."""
    return mask / mask.sum().clamp(min=1)


def seq_mean_token_mean(mask: torch.Tensor, budget: int) -> torch.Tensor:
    """GRPO: average the tokens of each sequence, then the sequences of the batch.
    mask [[1, 1], [1, 0]] -> [[1/4, 1/4], [1/2, 0]]."""
    per_seq = mask.sum(-1, keepdim=True).clamp(min=1)
    return mask / per_seq / mask.shape[0]


def seq_sum_const(mask: torch.Tensor, budget: int) -> torch.Tensor:
    """Dr. GRPO: sum the tokens of each sequence, divide by a constant (the generation budget)
    and the number of sequences, so long wrong answers are not under-penalised.
    mask [[1, 1], [1, 0]], budget 4 -> 1/8 per token."""
    return mask / float(budget) / mask.shape[0]


AGGREGATIONS: dict[str, Aggregation] = {"token_mean": token_mean, "seq_mean_token_mean": seq_mean_token_mean,
                                        "seq_sum_const": seq_sum_const}


def get_aggregation(name: str) -> Aggregation:
    if name not in AGGREGATIONS:
        raise UserError(f"algorithm.aggregation: unknown {name!r} (known: {', '.join(sorted(AGGREGATIONS))})")
    return AGGREGATIONS[name]
