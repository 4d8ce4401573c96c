"""Pipeline parallelism of the plain `Decoder`, applied from outside with torch.distributed.pipelining.

The model is cut by layer (`stage_layers`): `pp` stages of consecutive blocks, as even as the
layer count allows; the first stage also holds the embedding, the last the final norm and the
LM head. `cut_stage` prunes a rank's plain model in place to its stage (the other blocks, the
embedding or the head become `None`), so every parameter keeps its plain name and the optimizer,
state dicts and checkpoints see only the stage's own weights. A tied head is two copies after the
cut, the embedding on the first stage and `lm_head.weight` on the last, kept equal the way
Megatron does: their gradients are summed between the two (`sync_tied_grads`) before the
optimizer's identical steps, and the last stage's copy is left out of the gradient norm
(`is_pipeline_copy`). `StageModule` is what a `PipelineStage` runs: the stage's part of the
body's forward, the model's own blocks and rotary positions (one row per sample, causal
attention: the shared-prompt layout is not pipelined). `cut_stage` builds a rank's stage modules
once (`stage_modules`); with data parallel each is an FSDP root (`parallelize`), which torch's
runtime schedule gathers, reduces and reshards itself. The head is in the last stage's module
but not in its forward: the last stage's output is the final hidden states, which the loss
function scores (`pipeline_step`; `gathered_head` outside a schedule).

`run_schedule` runs micro-batches of equal shape through a 1F1B schedule (a fresh
`PipelineStage` with static shapes per call: batches' widths differ between calls, and
pipelining fixes its receive buffers' shapes when a stage is first run). `bubble_fraction`
measures the idle share of a schedule from its action list (`pipeline_order`).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterator

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import FSDPModule
from torch.distributed.pipelining import PipelineStage, ScheduleInterleaved1F1B
from torch.distributed.tensor import DTensor
from torch.distributed.pipelining.schedules import _Action, _ComputationType

from tempering.errors import UserError
from tempering.models import Decoder
from tempering.models.decoder import causal_attention
from tempering.models.rope import cos_sin

_COPY = "_tempering_pipeline_copy"  # marks the last stage's copy of a tied embedding
_STAGES = "_tempering_stages"  # a cut model's `StageModule`s (a plain attribute: not submodules)


def stage_layers(layers: int, stages: int, stage: int) -> range:
    """The blocks of `stage` of `stages`: consecutive, the first `layers % stages` stages one more."""
    if layers < stages:
        raise UserError(f"trainer.parallelize: {stages} pipeline stages (pp x pp_stages_per_rank) need at least "
                        f"{stages} layers; the model has {layers}")
    size, extra = divmod(layers, stages)
    start = stage * size + min(stage, extra)
    return range(start, start + size + (stage < extra))


def rank_stages(rank: int, pp: int, per_rank: int) -> list[int]:
    """The stages rank `rank` of `pp` runs: `rank`, `rank + pp`, ... (interleaved: looped over the ranks)."""
    return [rank + k * pp for k in range(per_rank)]


def cut_stage(model: Decoder, rank: int, pp: int, per_rank: int = 1) -> Decoder:
    """Prune `model` in place to the stages of `rank` (the same module comes back)."""
    body, stages = model.model, pp * per_rank
    mine = rank_stages(rank, pp, per_rank)
    keep = {i for s in mine for i in stage_layers(len(body.layers), stages, s)}
    tied = model.lm_head.weight is body.embed_tokens.weight
    first, last = 0 in mine, stages - 1 in mine
    for i in range(len(body.layers)):
        if i not in keep:
            body.layers[i] = None
    if not first:
        body.embed_tokens = None
    if not last:
        body.norm = None
        model.lm_head = None
    elif tied and not first:  # the last stage's own copy, kept equal by `sync_tied_grads`
        model.lm_head.weight = nn.Parameter(model.lm_head.weight.detach().clone())
        mark_copy(model.lm_head.weight)
    setattr(model, _STAGES, [StageModule(model, stage_layers(len(body.layers), stages, s), s == 0, s == stages - 1)
                             for s in mine])
    return model


def mark_copy(p: torch.Tensor) -> None:
    """Mark `p` as the last stage's copy of a tied embedding (again after FSDP replaced it)."""
    setattr(p, _COPY, True)


def is_pipeline_copy(p: torch.Tensor) -> bool:
    """Whether `p` is the last stage's copy of a tied embedding (counted once, on the first stage)."""
    return getattr(p, _COPY, False)


def sync_tied_grads(model: Decoder, tied: bool, group: dist.ProcessGroup, dp: tuple[int, int] = (0, 1)) -> None:
    """Sum the tied embedding's gradient over its two copies (first and last stage; the ranks
    between add zeros), so both take the same optimizer step. Under FSDP each copy's gradient is
    this rank's rows of it (rank `dp[0]` of `dp[1]`), the same rows in both copies."""
    if not tied:
        return
    body = model.model
    p = body.embed_tokens.weight if body.embed_tokens is not None else model.lm_head.weight if model.lm_head else None
    if p is None:  # a middle rank: its share of FSDP's dim-0 chunks of the embedding
        rows = list(torch.empty(model.arch.vocab_size, 0).chunk(dp[1]))
        shape = (rows[dp[0]].shape[0] if dp[0] < len(rows) else 0, model.arch.hidden_size)
        dist.all_reduce(torch.zeros(shape, device=model.inv_freq.device), group=group)
        return
    if p.grad is None:
        p.grad = torch.zeros_like(p)
    dist.all_reduce(p.grad.to_local() if isinstance(p.grad, DTensor) else p.grad, group=group)


class StageModule(nn.Module):
    """One stage's share of the body's forward: token ids (first stage) or hidden states [B, T, H]
    in, hidden states out (the last stage's after the final norm). Its children are the model's
    own modules (the stage's blocks; the embedding on the first stage; the norm and the LM head on
    the last, the head scored outside `forward` by the loss, but here so that a data-parallel
    stage's FSDP unit holds it)."""

    def __init__(self, model: Decoder, layers: range, first: bool, last: bool):
        super().__init__()
        body = model.model
        self.embed = body.embed_tokens if first else None
        self.blocks = nn.ModuleList(body.layers[i] for i in layers)
        self.norm = body.norm if last else None
        self.head = model.lm_head if last else None
        self._decoder = [model]  # for its rotary frequencies (in a list: not a submodule)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.embed is not None:
            x = self.embed(x)
        positions = torch.arange(x.shape[1], device=x.device).expand(x.shape[:2])
        cos, sin = cos_sin(self._decoder[0].inv_freq, positions, x.dtype)
        for block in self.blocks:
            x = block(x, cos, sin, causal_attention)
        return self.norm(x) if self.norm is not None else x


@contextmanager
def gathered_head(model: Decoder) -> Iterator[torch.Tensor]:
    """The last stage's LM head weight, whole, for scoring outside a schedule: under FSDP a
    schedule reshards each stage after its last micro-batch, so the stage is gathered again."""
    stage = stage_modules(model)[-1]
    if not isinstance(stage, FSDPModule):
        yield model.lm_head.weight
        return
    stage.unshard()
    try:
        yield model.lm_head.weight
    finally:
        stage.reshard()


def stage_modules(model: Decoder) -> list[StageModule]:
    """The stage modules `cut_stage` built for this rank, in `rank_stages` order."""
    return getattr(model, _STAGES)


def run_schedule(model: Decoder, rank: int, pp: int, per_rank: int, group: dist.ProcessGroup, ids: torch.Tensor,
                 microbatches: int, loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
                 target: torch.Tensor | None = None) -> tuple[torch.Tensor | None, float]:
    """`ids` [R, T] (R a multiple of `microbatches`, which is a multiple of `pp`; every rank the
    same) through the stages of cut `model` on an (interleaved) 1F1B schedule. With `loss_fn` (on
    the last stage, of the hidden states [R/m, T, H] and the micro-batch's rows of `target`) each
    micro-batch's loss is backpropagated, unscaled: the caller's loss weights are already over
    the whole batch. -> the last stage's hidden states [R, T, H] (None on the other ranks) and
    the schedule's `bubble_fraction`"""
    device, stages = model.inv_freq.device, pp * per_rank
    rows, width = ids.shape[0] // microbatches, ids.shape[1]
    dtype = next(model.parameters()).dtype
    # the shapes every micro-batch's activations have (static: no metadata exchange); requiring
    # grad makes the receiving stage's buffers leaves whose gradient is sent back
    act = torch.empty(rows, width, model.arch.hidden_size, device=device, dtype=dtype,
                      requires_grad=loss_fn is not None)
    pipes = []
    for s, module in zip(rank_stages(rank, pp, per_rank), stage_modules(model), strict=True):
        pipes.append(PipelineStage(module, s, stages, device, input_args=ids[:rows].to(device) if s == 0 else act,
                                   output_args=act, group=group))
    schedule = ScheduleInterleaved1F1B(pipes, microbatches, loss_fn=loss_fn, scale_grads=False)
    args = (ids.to(device),) if rank == 0 else ()
    out = schedule.step(*args, target=target) if loss_fn is not None else schedule.eval(*args)
    return out, bubble_fraction(schedule.pipeline_order)


def bubble_fraction(order: dict[int, list[_Action | None]], backward_cost: float = 2.0) -> float:
    """The idle share of the ranks' time when `order` (a schedule's `pipeline_order`: rank ->
    actions) runs with forward 1 and backward `backward_cost` time units, each action starting
    once its rank is free and its inputs are ready (a stage's forward after the previous stage's
    forward of that micro-batch, a backward after the next stage's backward). 1F1B's is
    (pp - 1) / (microbatches + pp - 1)."""
    cost = {_ComputationType.FORWARD: 1.0, _ComputationType.FULL_BACKWARD: backward_cost,
            _ComputationType.BACKWARD_INPUT: backward_cost / 2, _ComputationType.BACKWARD_WEIGHT: backward_cost / 2}
    queues = {r: [a for a in acts if a is not None and a.computation_type in cost] for r, acts in order.items()}
    last = max(a.stage_index for q in queues.values() for a in q)
    done: dict[tuple[int, str, int], float] = {}
    free = dict.fromkeys(queues, 0.0)
    busy = dict.fromkeys(queues, 0.0)
    while any(queues.values()):
        progressed = False
        for r, queue in queues.items():
            while queue:
                a = queue[0]
                kind = "F" if a.computation_type == _ComputationType.FORWARD else "B"
                needs = _needs(a, kind, last)
                if any(n not in done for n in needs):
                    break
                start = max([free[r], *(done[n] for n in needs)])
                free[r] = start + cost[a.computation_type]
                busy[r] += cost[a.computation_type]
                if a.computation_type != _ComputationType.BACKWARD_WEIGHT:
                    done[(a.stage_index, kind, a.microbatch_index)] = free[r]
                queue.pop(0)
                progressed = True
        if not progressed:
            raise ValueError("bubble_fraction: the schedule's actions wait on each other")
    span = max(free.values())
    return 1.0 - sum(busy.values()) / (span * len(busy))


def _needs(a: _Action, kind: str, last: int) -> list[tuple[int, str, int]]:
    """What action `a` of kind "F" or "B" waits for."""
    s, m = a.stage_index, a.microbatch_index
    if kind == "F":
        return [(s - 1, "F", m)] if s > 0 else []
    if a.computation_type == _ComputationType.BACKWARD_WEIGHT:
        return [(s, "B", m)]
    return [(s, "F", m)] + ([(s + 1, "B", m)] if s < last else [])
