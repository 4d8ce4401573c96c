"""The `trainer.parallelize` section: how the trainer's ranks form a device mesh
(`tempering.trainer.mesh`). The product of its four sizes must be `runtime.trainer_ranks`; the
mesh checks that where both are known, and names the keys when they disagree."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

from tempering.config.checks import Range, check_fields


@dataclass(frozen=True)
class ParallelizeConfig:
    """The trainer ranks' device mesh, pp x dp_replicate x dp_shard x tp (docs/parallelism.md);
    the product of the sizes is runtime.trainer_ranks."""

    dp_replicate: Annotated[int, Range(ge=1)] = 1  # HSDP: replicas of the FSDP-sharded model, gradients summed
    # FSDP2 shards; -1 = the ranks the other sizes leave
    dp_shard: Annotated[int | Literal[-1], Range(ge=1)] = -1
    tp: Annotated[int, Range(ge=1)] = 1  # tensor parallel: heads, MLP columns, vocabulary; sequence-parallel norms
    # pipeline stages, cut by layer (1F1B over micro-batches), each sharded over the dp sizes; with pp > 1, tp must be 1
    pp: Annotated[int, Range(ge=1)] = 1
    # stages each pipeline rank runs: 1 = 1F1B; more = interleaved 1F1B (looped stages, a smaller
    # bubble, more activation transfers); pp x this must not exceed the model's layers
    pp_stages_per_rank: Annotated[int, Range(ge=1)] = 1
    device: Literal["auto", "cpu", "cuda"] = "auto"  # auto: cuda (NCCL) where there is one, else cpu (gloo)

    def __post_init__(self) -> None:
        check_fields(self, "trainer.parallelize")
