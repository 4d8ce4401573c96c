"""`Ranks`: how the trainer's model and each batch are spread over its device mesh (`mesh`).

The plain `Decoder` is parallelized from outside: tensor parallel first on the mesh's "tp"
dimension (`tensor_parallel`), then `fully_shard` on the data-parallel one ("dp_shard", or
"dp_replicate" x "dp_shard" for HSDP): each transformer block is one unit (its parameters
gathered just before it runs, forward or backward, and freed after), then the root, whose unit
holds what is left: the embeddings, the final norm and `lm_head`. A tied `lm_head` is the
embedding's own parameter, so keeping both in the root's unit keeps them one parameter (FSDP2
re-points both modules at the one sharded tensor). With pipeline stages (`pp`) the model is cut
to the rank's stages first and each stage module is sharded the same way, as a root of its own.

Every rank is given the whole batch and its data-parallel rank trains its share of the groups
(`Trainer._micro_batches` asks `deal`; the ranks of one tp group train the same rows) with token
weights computed on the whole batch, so each share's loss is its part of the batch's loss and
the gradients are summed over the data-parallel ranks, not averaged: the sum is the full-batch
gradient. Every rank runs as many forward/backward passes as the busiest one (`padding`: passes
at weight 0), since each pass gathers shards from all ranks. The gradient norm is reduced over
the mesh dimensions each gradient is sharded on (`clip_grad_norm`).

The reference model is built on the meta device, parallelized the same way and filled from the
policy's local shards: no rank holds more of it than the unit a forward pass gathers. The critic
is not sharded yet, so GAE is refused (`check`), and so is LoRA under tensor parallel. Mixed
precision: bf16 compute with fp32 gradient reduction where the device has bf16 (CUDA); on CPU
everything stays fp32. Moving batches to an accelerator is not done here.
"""

from __future__ import annotations

from copy import deepcopy
from dataclasses import dataclass
from typing import Iterable

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import DTensor, Replicate

from tempering.config import AlgorithmConfig
from tempering.errors import UserError
from tempering.models import Decoder
from tempering.models.lora import adapters
from tempering.records import Batch
from tempering.trainer.mesh import MeshShape
from tempering.trainer.offpolicy import OffPolicyMeter
from tempering.trainer.pipeline import cut_stage, is_pipeline_copy, mark_copy, stage_modules
from tempering.trainer.tensor_parallel import apply_tp


def mixed_precision(device: torch.device) -> MixedPrecisionPolicy:
    """bf16 parameters in forward/backward and fp32 gradient reduction on CUDA with bf16; fp32 on
    CPU: few CPUs have fast bf16 matmuls (without AMX it is emulated and slower than fp32), and
    the CPU run is the one checked against the single-process trainer's fp32 arithmetic."""
    if device.type == "cuda" and torch.cuda.is_bf16_supported():
        return MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    return MixedPrecisionPolicy()


@dataclass
class Ranks:
    """One rank's view of the group: the mesh the model is parallelized over and the precision."""

    mesh: DeviceMesh  # named as `mesh.DIMS`, with the flattened "dp"
    mp: MixedPrecisionPolicy
    shape: MeshShape = MeshShape()

    @property
    def rank(self) -> int:
        return self.mesh.get_rank()

    @property
    def world(self) -> int:
        return self.mesh.size()

    def shard(self, model: Decoder, frozen: bool = False) -> Decoder:
        """Tensor parallel, then `fully_shard` per block and the root (in place; the same module
        comes back). The root of a trained model stays gathered from forward to backward; a
        frozen one's (no backward comes) is freed after its forward. With pipeline stages the
        model is cut to this rank's (`pipeline.cut_stage`) and, with data parallel, each stage
        module sharded the same way (its blocks, then it as the root)."""
        if self.shape.pp > 1:
            if adapters(model):
                raise UserError("trainer.lora_rank > 0 with trainer.parallelize.pp > 1: LoRA adapters are not "
                                "pipelined yet")
            cut_stage(model, self.mesh.get_local_rank("pp"), self.shape.pp, self.shape.stages_per_rank)
            if self.shape.dp > 1:  # each stage module an FSDP root, its blocks units of their own
                copy = model.lm_head is not None and is_pipeline_copy(model.lm_head.weight)
                for stage in stage_modules(model):
                    self._fully_shard(stage, stage.blocks, frozen)
                if copy:  # FSDP's sharded parameter is a new one
                    mark_copy(model.lm_head.weight)
            return model
        if self.shape.tp > 1:
            if adapters(model):
                raise UserError("trainer.lora_rank > 0 with trainer.parallelize.tp > 1: LoRA adapters are not "
                                "tensor parallel yet")
            apply_tp(model, self.mesh["tp"])
        if self.shape.dp > 1:
            self._fully_shard(model, model.model.layers, frozen)
        return model

    def _fully_shard(self, root: nn.Module, blocks: Iterable[nn.Module], frozen: bool) -> None:
        """`fully_shard` each of `blocks`, then `root` (the rest of its parameters) over the data-parallel
        dimensions: "dp_shard", or "dp_replicate" x "dp_shard" for HSDP."""
        dims = ("dp_replicate", "dp_shard") if self.shape.dp_replicate > 1 else ("dp_shard",)
        mesh = self.mesh[dims]
        for block in blocks:
            fully_shard(block, mesh=mesh, mp_policy=self.mp)
        # a pipeline stage's root stays gathered after its forward: the loss scores with its head
        after = True if frozen and self.shape.pp == 1 else None
        fully_shard(root, mesh=mesh, mp_policy=self.mp, reshard_after_forward=after)
        for module in root.modules():
            if isinstance(module, FSDPModule):
                # sum, not mean: the ranks' losses are shares of one loss (weights over the whole batch)
                module.set_gradient_divide_factor(1.0)
                # gloo has no PREMUL_SUM, which a divide factor would otherwise use
                module.set_force_sum_reduction_for_comms(self.mesh.device_type == "cpu")

    def frozen_copy(self, model: Decoder) -> Decoder:
        """A sharded, frozen copy of sharded `model` (the reference): built on meta, sharded like
        it, each rank copying only its own shards (a pipeline stage alone: a copy of the stage)."""
        if self.shape.pp > 1 and self.shape.dp == 1:
            copy = deepcopy(model).eval()
            for p in copy.parameters():
                p.requires_grad_(False)
            return copy
        with torch.device("meta"):
            copy = Decoder(model.arch)
        for p in copy.parameters():
            p.requires_grad_(False)
        self.shard(copy, frozen=True)
        for p in copy.parameters():  # tensor parallel's new parameters are trainable ones
            p.requires_grad_(False)
        copy.to_empty(device=next(model.parameters()).device)
        with torch.no_grad():
            for mine, theirs in zip(copy.parameters(), model.parameters(), strict=True):
                mine.to_local().copy_(theirs.to_local())
            for mine, theirs in zip(copy.buffers(), model.buffers(), strict=True):
                mine.copy_(theirs)  # inv_freq: derived, but to_empty left it uninitialised
        return copy.eval()

    def check(self, algo: AlgorithmConfig) -> None:
        if algo.advantage == "gae":
            raise UserError("algorithm.advantage = 'gae' is not supported by the FSDP trainer yet: the critic "
                            "is not sharded and GAE whitens over the whole batch's values")

    def check_sft(self) -> None:
        if self.shape.pp > 1:
            raise UserError("SFT steps (the warm-up) are not pipelined yet: trainer.parallelize.pp must be 1 with "
                            "sft warm-up steps")

    def shares(self, cost: dict[int, int]) -> list[dict[int, int]]:
        """Every data-parallel rank's units (groups, or rows) of `cost` (unit -> tokens through the
        model), in dp rank order: the costliest first, each to the least loaded rank. Every rank
        holds the same batch, so all deal alike without talking."""
        load, owner = [0] * self.shape.dp, {}
        for key in sorted(cost, key=lambda k: -cost[k]):
            rank = min(range(self.shape.dp), key=load.__getitem__)
            owner[key] = rank
            load[rank] += cost[key]
        return [{key: c for key, c in cost.items() if owner[key] == d} for d in range(self.shape.dp)]

    def deal(self, cost: dict[int, int]) -> dict[int, int]:
        """This data-parallel rank's share of `cost` (`shares`)."""
        return self.shares(cost)[self.dp_rank]

    @property
    def dp_rank(self) -> int:
        return self.mesh.get_local_rank("dp") if self.shape.dp > 1 else 0

    def padding(self, batch: Batch, micro: list[torch.Tensor]) -> list[torch.Tensor]:
        """Rows for the passes this rank runs at weight 0 so that it runs as many as the busiest
        rank: the shortest row it does not own (it recomputes nothing of its own)."""
        count = torch.tensor([len(micro)], device=self._device())
        dist.all_reduce(count, dist.ReduceOp.MAX)
        missing = int(count) - len(micro)
        if missing == 0:
            return []
        own = set(torch.cat(micro).tolist()) if micro else set()
        others = [r for r in range(len(batch.seq_lens)) if r not in own] or [0]
        row = min(others, key=lambda r: int(batch.seq_lens[r]))
        return [torch.tensor([row])] * missing

    def sum(self, totals: torch.Tensor) -> torch.Tensor:
        """Over the data-parallel ranks (a tp group's ranks hold the same totals)."""
        if self.shape.dp == 1:
            return totals
        out = totals.to(self._device())
        dist.all_reduce(out, group=self.mesh.get_group("dp"))
        return out.to(totals.device)

    def merge(self, meter: OffPolicyMeter) -> OffPolicyMeter:
        """Every data-parallel rank's trained tokens in one meter (its percentiles are of the whole batch)."""
        if self.shape.dp == 1:
            return meter
        meters: list[OffPolicyMeter | None] = [None] * self.shape.dp
        dist.all_gather_object(meters, meter, group=self.mesh.get_group("dp"))
        merged = OffPolicyMeter(meter.is_cap)
        for other in meters:
            assert other is not None
            merged.merge(other)
        return merged

    def clip_grad_norm(self, params: list[torch.Tensor], max_norm: float) -> float:
        """`torch.nn.utils.clip_grad_norm_` over parameters sharded on different mesh dimensions:
        gradients still partial are summed first, then each one's squares summed locally and over
        the dimensions it is sharded on (not those it is replicated on). -> the norm before clipping"""
        by_dims: dict[tuple[int, ...], torch.Tensor] = {}
        for p in params:
            if isinstance(p.grad, DTensor) and any(pl.is_partial() for pl in p.grad.placements):
                # a replicated parameter used on sequence-parallel activations (the norms): each
                # tp rank has its tokens' share of the gradient; DTensor sums them lazily, we now
                p.grad = p.grad.redistribute(placements=[Replicate() if pl.is_partial() else pl
                                                         for pl in p.grad.placements])
        grads = [p.grad for p in params if p.grad is not None]
        for p in params:
            g = p.grad
            if g is None or is_pipeline_copy(p):  # a tied embedding's second copy counts once
                continue
            # pipeline stages hold parameters of their own
            dims: tuple[int, ...] = (self.mesh.mesh_dim_names.index("pp"),) if self.shape.pp > 1 else ()
            if isinstance(g, DTensor):
                # (a strided shard, FSDP over tensor parallel, is not `is_shard()`)
                dims += tuple(self._root_dim(g, i) for i, pl in enumerate(g.placements) if not pl.is_replicate())
                g = g.to_local()
            square = g.detach().float().pow(2).sum()
            by_dims[dims] = by_dims.get(dims, 0) + square
        total = torch.zeros((), device=self._device())
        for dims, square in sorted(by_dims.items()):
            square = square.to(self._device())
            for d in dims:
                dist.all_reduce(square, group=self.mesh.get_group(d))
            total += square
        norm = float(total.sqrt())
        scale = min(1.0, max_norm / (norm + 1e-6))
        if scale < 1.0:
            for g in grads:
                (g.to_local() if isinstance(g, DTensor) else g).mul_(scale)
        return norm

    def _root_dim(self, t: DTensor, i: int) -> int:
        """Dimension `i` of `t`'s mesh as a dimension of the world's mesh."""
        names = t.device_mesh.mesh_dim_names
        assert names is not None
        return self.mesh.mesh_dim_names.index(names[i])

    def _device(self) -> torch.device:
        return torch.device(self.mesh.device_type)
