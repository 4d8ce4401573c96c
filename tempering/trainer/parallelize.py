"""`Ranks`: how the trainer's model and each batch are spread over a torch.distributed group (FSDP2).

The plain `Decoder` is sharded from outside with `fully_shard`: each transformer block is one
unit (its parameters gathered just before it runs, forward or backward, and freed after), then
the root, whose unit holds what is left: the embeddings, the final norm and `lm_head`. A tied
`lm_head` is the embedding's own parameter, so keeping both in the root's unit keeps them one
parameter (FSDP2 re-points both modules at the one sharded tensor).

Every rank is given the whole batch and trains its share of the groups (`Trainer._micro_batches`
asks `deal`) with token weights computed on the whole batch, so each rank's loss is its share of
the batch's loss and the ranks' gradients are summed, not averaged: the sum is the full-batch
gradient. Every rank runs as many forward/backward passes as the busiest one (`padding`: passes
at weight 0), since each pass gathers shards from all ranks.

The reference model is built on the meta device, sharded the same way and filled from the
policy's local shards: no rank holds more of it than the unit a forward pass gathers. The critic
is not sharded yet, so GAE is refused (`check`). Mixed precision: bf16 compute with fp32
gradient reduction where the device has bf16 (CUDA); on CPU everything stays fp32. Moving
batches to an accelerator is not done here.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard

from tempering.config import AlgorithmConfig
from tempering.errors import UserError
from tempering.models import Decoder
from tempering.records import Batch
from tempering.trainer.offpolicy import OffPolicyMeter


def mixed_precision(device: torch.device) -> MixedPrecisionPolicy:
    """bf16 parameters in forward/backward and fp32 gradient reduction on CUDA with bf16; fp32 on
    CPU: few CPUs have fast bf16 matmuls (without AMX it is emulated and slower than fp32), and
    the CPU run is the one checked against the single-process trainer's fp32 arithmetic."""
    if device.type == "cuda" and torch.cuda.is_bf16_supported():
        return MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    return MixedPrecisionPolicy()


@dataclass
class Ranks:
    """One rank's view of the group: the mesh the model is sharded over and the precision."""

    mesh: DeviceMesh
    mp: MixedPrecisionPolicy

    @property
    def rank(self) -> int:
        return self.mesh.get_local_rank()

    @property
    def world(self) -> int:
        return self.mesh.size()

    def shard(self, model: Decoder, frozen: bool = False) -> Decoder:
        """`fully_shard` per block, then the root (in place; the same module comes back). The root
        of a trained model stays gathered from forward to backward; a frozen one's (no backward
        comes) is freed after its forward."""
        for block in model.model.layers:
            fully_shard(block, mesh=self.mesh, mp_policy=self.mp)
        fully_shard(model, mesh=self.mesh, mp_policy=self.mp, reshard_after_forward=True if frozen else None)
        for module in model.modules():
            if isinstance(module, FSDPModule):
                # sum, not mean: the ranks' losses are shares of one loss (weights over the whole batch)
                module.set_gradient_divide_factor(1.0)
                # gloo has no PREMUL_SUM, which a divide factor would otherwise use
                module.set_force_sum_reduction_for_comms(self.mesh.device_type == "cpu")
        return model

    def frozen_copy(self, model: Decoder) -> Decoder:
        """A sharded, frozen copy of sharded `model` (the reference): built on meta, sharded like
        it, each rank copying only its own shards."""
        with torch.device("meta"):
            copy = Decoder(model.arch)
        for p in copy.parameters():
            p.requires_grad_(False)
        self.shard(copy, frozen=True)
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

    def deal(self, cost: dict[int, int]) -> dict[int, int]:
        """This rank's units (groups, or rows) of `cost` (unit -> tokens through the model): the
        costliest first, each to the least loaded rank. Every rank holds the same batch, so all
        deal alike without talking."""
        load, owner = [0] * self.world, {}
        for key in sorted(cost, key=lambda k: -cost[k]):
            rank = min(range(self.world), key=load.__getitem__)
            owner[key] = rank
            load[rank] += cost[key]
        return {key: c for key, c in cost.items() if owner[key] == self.rank}

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
        out = totals.to(self._device())
        dist.all_reduce(out)
        return out.to(totals.device)

    def merge(self, meter: OffPolicyMeter) -> OffPolicyMeter:
        """Every rank's trained tokens in one meter (its percentiles are of the whole batch)."""
        meters: list[OffPolicyMeter | None] = [None] * self.world
        dist.all_gather_object(meters, meter)
        merged = OffPolicyMeter(meter.is_cap)
        for other in meters:
            assert other is not None
            merged.merge(other)
        return merged

    def _device(self) -> torch.device:
        return torch.device(self.mesh.device_type)
