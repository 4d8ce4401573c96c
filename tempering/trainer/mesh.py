"""`MeshShape`: the trainer's ranks as a named device mesh, `pp x dp_replicate x dp_shard x tp`.

torchtitan's layout: tensor parallel innermost (its ranks exchange activations at every block,
so they should share a node), then FSDP's shards, then HSDP's replicas, pipeline stages
outermost (they exchange one activation per micro-batch). The sizes come from
`trainer.parallelize`; `dp_shard = -1` takes the ranks the others leave, and the product must
be the number of trainer ranks. The data-parallel ranks (replicas x shards) are the ones that
split a batch's rows; the ranks of one tp group (and of one pipeline) train the same rows. It
builds the mesh, not the model's parallelism (`parallelize`, `tensor_parallel`, `pipeline`).
Pipeline stages combine with data parallel (each stage sharded or replicated over the "dp"
ranks of its pipeline coordinate), not with tensor parallel yet: `pp > 1` needs `tp = 1` (a
`ConfigError` says so).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

from tempering.config import ConfigError, ParallelizeConfig

DIMS = ("pp", "dp_replicate", "dp_shard", "tp")


@dataclass(frozen=True)
class MeshShape:
    pp: int = 1
    dp_replicate: int = 1
    dp_shard: int = 1
    tp: int = 1
    stages_per_rank: int = 1  # pipeline stages each pp rank runs (interleaved 1F1B when > 1)

    @property
    def sizes(self) -> tuple[int, ...]:
        return tuple(getattr(self, d) for d in DIMS)

    @property
    def world(self) -> int:
        return self.pp * self.dp_replicate * self.dp_shard * self.tp

    @property
    def dp(self) -> int:
        return self.dp_replicate * self.dp_shard

    def __str__(self) -> str:
        return " x ".join(f"{d}={getattr(self, d)}" for d in DIMS)


def mesh_shape(cfg: ParallelizeConfig, world: int) -> MeshShape:
    """The sizes for `world` ranks (`runtime.trainer_ranks`), `dp_shard = -1` resolved. A layout
    whose product is not `world` is a `ConfigError` naming the keys."""
    rest = cfg.dp_replicate * cfg.tp * cfg.pp
    dp_shard = cfg.dp_shard if cfg.dp_shard != -1 else (world // rest if world % rest == 0 else 0)
    shape = MeshShape(cfg.pp, cfg.dp_replicate, dp_shard, cfg.tp, cfg.pp_stages_per_rank if cfg.pp > 1 else 1)
    if dp_shard < 1 or shape.world != world:
        raise ConfigError(f"trainer.parallelize: dp_replicate ({cfg.dp_replicate}) x dp_shard ({cfg.dp_shard}) x "
                          f"tp ({cfg.tp}) x pp ({cfg.pp}) must equal runtime.trainer_ranks ({world})")
    if shape.pp > 1 and shape.tp > 1:
        raise ConfigError(f"trainer.parallelize: pp = {shape.pp} with tp = {shape.tp}: pipeline parallel is not "
                          "combined with tensor parallel yet (pp > 1 needs tp = 1; data parallel is fine)")
    return shape


def device_type(cfg: ParallelizeConfig) -> str:
    """"cuda" or "cpu" from `trainer.parallelize.device` (auto: cuda where there is one)."""
    if cfg.device == "cuda" and not torch.cuda.is_available():
        raise ConfigError("trainer.parallelize.device: 'cuda', but torch sees no CUDA device")
    if cfg.device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return cfg.device


def build_mesh(shape: MeshShape, device: str) -> DeviceMesh:
    """The world's mesh with its four named dimensions (size-1 ones included: code asks for
    `mesh["tp"]` whatever the layout) and a flattened "dp" one for the data-parallel sums."""
    mesh = init_device_mesh(device, shape.sizes, mesh_dim_names=DIMS)
    mesh["dp_replicate", "dp_shard"]._flatten("dp")
    return mesh
