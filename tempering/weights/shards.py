"""Weight sync from a sharded trainer without gathering: every rank publishes its own shards,
the engine's side assembles the full tensors.

`local_pieces` is a rank's share of a parallelized model's weights (FSDP2, tensor parallel: its
DTensors' local tensors with where each sits in the full tensor); a dimension a tensor is
replicated on is published by that dimension's first rank only, so the pieces of all ranks tile
every tensor once and the bytes written sum to one copy of the model. `ShardPublisher` writes
them, collectively: each rank one file per version (`v<version>/rank<r>.pt`) in a folder the
engines read (a node's disk, or a shared filesystem across nodes), then rank 0 makes the
version current (`LATEST`, renamed into place) and removes the older ones. `ShardSource` is the
engine's `WeightSource`: it reads the current version's files and `assemble`s the full state.
No rank holds more than its own shards; rank 0's gathered copy (`group.TrainerGroup`'s) is the
alternative it replaces. A run's trainer group publishes this way when its engines share the
trainer's machine (train.py: the local runtime), into the run's `weights/` folder.
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor
from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

from tempering.engine import LLM
from tempering.models import Decoder
from tempering.weights.sync import PublishStats


@dataclass(frozen=True)
class Piece:
    """A block of one full tensor: its name, the full shape, where the block starts in it."""

    name: str
    shape: tuple[int, ...]
    offset: tuple[int, ...]
    tensor: torch.Tensor


def local_pieces(model: Decoder, own: bool = False, skip: frozenset[str] = frozenset()) -> list[Piece]:
    """This rank's pieces of every distinct tensor of `model`'s state_dict (a tied head once), but
    those named in `skip`. A plain tensor is whole on every rank (rank 0 publishes it), or with
    `own` (a pipeline stage's) this rank's alone."""
    pieces, seen = [], set()
    for name, t in model.state_dict().items():
        local = t.to_local() if isinstance(t, DTensor) else t
        if local.data_ptr() in seen or name in skip:
            continue
        seen.add(local.data_ptr())
        if not isinstance(t, DTensor):
            if own or not dist.is_initialized() or dist.get_rank() == 0:
                pieces.append(Piece(name, tuple(t.shape), (0,) * t.dim(), t.detach()))
            continue
        coordinate = t.device_mesh.get_coordinate()
        assert coordinate is not None
        if any(p.is_replicate() and coordinate[i] != 0 for i, p in enumerate(t.placements)):
            continue  # another rank publishes this copy
        _, offset = compute_local_shape_and_global_offset(t.shape, t.device_mesh, t.placements)
        if local.numel():
            pieces.append(Piece(name, tuple(t.shape), tuple(offset), local.detach()))
    return pieces


def assemble(pieces: list[Piece]) -> dict[str, torch.Tensor]:
    """Full tensors from the pieces of all ranks (each element must come once)."""
    out: dict[str, torch.Tensor] = {}
    filled: dict[str, int] = {}
    for p in pieces:
        full = out.get(p.name)
        if full is None:
            full = out[p.name] = torch.empty(p.shape, dtype=p.tensor.dtype)
        box = tuple(slice(o, o + n) for o, n in zip(p.offset, p.tensor.shape))
        full[box].copy_(p.tensor)
        filled[p.name] = filled.get(p.name, 0) + p.tensor.numel()
    missing = {name: (n, out[name].numel()) for name, n in filled.items() if n != out[name].numel()}
    assert not missing, f"pieces do not tile their tensors (elements written, wanted): {missing}"
    return out


class ShardPublisher:
    """The trainer's side, on every rank (`publish` is collective); `own` and `skip` as
    `local_pieces` takes them (a pipeline stage: its plain tensors are its own, a tied head's
    copy is left out)."""

    def __init__(self, folder: Path, own: bool = False, skip: frozenset[str] = frozenset()):
        self.folder = Path(folder)
        self.own, self.skip = own, skip
        self.stats = PublishStats()  # this rank's: its own bytes and seconds

    @torch.no_grad()
    def publish(self, model: Decoder, version: int) -> None:
        start = time.perf_counter()
        rank = dist.get_rank()
        pieces = local_pieces(model, self.own, self.skip)
        where = self.folder / f"v{version}"
        where.mkdir(parents=True, exist_ok=True)
        torch.save([Piece(p.name, p.shape, p.offset, p.tensor.cpu()) for p in pieces], where / f"rank{rank}.pt")
        dist.barrier()  # every rank's file is written
        if rank == 0:
            (where / "ranks").write_text(str(dist.get_world_size()))
            tmp = self.folder / "LATEST.tmp"
            tmp.write_text(str(version))
            os.replace(tmp, self.folder / "LATEST")
            for old in self.folder.glob("v*"):
                # older ones only: the other ranks may be writing the next already
                if old.is_dir() and old.name[1:].isdigit() and int(old.name[1:]) < version:
                    shutil.rmtree(old, ignore_errors=True)  # a reader still on it gives up that pull
        self.stats.publishes += 1
        self.stats.seconds += time.perf_counter() - start
        self.stats.bytes += sum(p.tensor.nbytes for p in pieces)


class ShardSource:
    """The engine's side: the newest published version, assembled from every rank's file."""

    def __init__(self, folder: Path):
        self.folder = Path(folder)
        self.fetch_s = 0.0  # the engine reads the files inside `pull`, which its time covers

    @property
    def version(self) -> int:
        latest = self.folder / "LATEST"
        return int(latest.read_text()) if latest.is_file() else -1

    def state(self, version: int) -> Mapping[str, torch.Tensor]:
        where = self.folder / f"v{version}"
        ranks = int((where / "ranks").read_text())
        pieces = [p for r in range(ranks) for p in torch.load(where / f"rank{r}.pt", weights_only=False)]
        return assemble(pieces)

    def pull(self, engine: LLM) -> bool:
        version = self.version
        if version <= engine.version:
            return False
        try:
            state = self.state(version)
        except FileNotFoundError:  # a newer version replaced it while we read: the next pull takes that one
            return False
        engine.load_weights(state, version)
        return True
