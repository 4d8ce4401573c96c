"""Token logprobs and entropy over an LM head split by vocabulary across tensor-parallel ranks.

Each rank holds `vocab / tp` rows of the head (a DTensor sharded on dim 0, `tensor_parallel`) and
the whole hidden states. It computes its own logits only; the log-normaliser, the target's logit
and the entropy's sum come from three all-reduces of `[tokens]` vectors over the tp group, so no
rank ever holds `[tokens, vocab]` (the head's memory is divided by tp, as loss parallel does).
The reductions' backward is the identity (what comes out of one is used alike on every rank,
so its gradient is the same everywhere and reaches each rank's own logits), and the hidden states' gradient, which each rank has only its
vocabulary's share of, is summed over the group on the way back. Not chunked over tokens: the
split by vocabulary is the memory saving here (`logprobs.head_logprobs` chunks the plain head).
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor, Shard


class _Reduce(torch.autograd.Function):
    """Forward: the sum over the group. Backward: the identity."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, group: dist.ProcessGroup) -> torch.Tensor:
        out = x.clone()
        dist.all_reduce(out, group=group)
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return grad, None


class _Copy(torch.autograd.Function):
    """Forward: the identity (the input is the same on every rank). Backward: the sum over the group."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, group: dist.ProcessGroup) -> torch.Tensor:
        ctx.group = group
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        grad = grad.contiguous().clone()
        dist.all_reduce(grad, group=ctx.group)
        return grad, None


def is_vocab_parallel(weight: torch.Tensor) -> bool:
    return isinstance(weight, DTensor) and weight.placements[-1] == Shard(0)


def vocab_parallel_logprobs(hidden: torch.Tensor, weight: DTensor, targets: torch.Tensor, temperature: float = 1.0,
                            with_entropy: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """hidden [M, H] (whole on every rank), weight [V, H] sharded by rows over its mesh's last
    dimension, targets [M] -> logprob of each target [M] in fp32, and the entropy [M] when asked:
    the same as `logprobs.head_logprobs` with the whole head."""
    mesh = weight.device_mesh
    group = mesh.get_group(mesh.ndim - 1)
    local = weight.to_local()
    rows = local.shape[0]
    start = mesh.get_local_rank(mesh.ndim - 1) * rows  # an even split: `tensor_parallel.check_tp`
    z = (_Copy.apply(hidden, group) @ local.T).float() / temperature  # [M, V / tp]
    with torch.no_grad():  # any constant keeps the sums in range; the global max is the usual one
        top = z.max(-1).values
        dist.all_reduce(top, dist.ReduceOp.MAX, group=group)
    shifted = z - top[:, None]
    exp = shifted.exp()
    total = _Reduce.apply(exp.sum(-1), group)  # [M]
    lse = total.log()  # the log-normaliser, less `top`
    mine = (targets >= start) & (targets < start + rows)
    picked = shifted.gather(-1, (targets - start).clamp(0, rows - 1)[:, None]).squeeze(-1)
    logp = _Reduce.apply(torch.where(mine, picked, torch.zeros_like(picked)), group) - lse
    if not with_entropy:
        return logp, None
    # H = lse - sum_v p_v z_v = lse - sum_v e^z_v z_v / sum_v e^z_v (z shifted alike throughout):
    # only sums over each rank's own vocabulary go into a reduction, and what comes out of one is
    # used alike on every rank (that is what makes the reductions' backward the identity)
    return logp, lse - _Reduce.apply((exp * shifted).sum(-1), group) / total
