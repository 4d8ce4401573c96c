"""One rank of the FSDP2 trainer: join the group, shard, train on given batches, checkpoint.

Every rank runs the same calls in the same order (each one is collective): `init_ranks` joins
the torch.distributed group the launcher describes (torchrun's environment variables, or an
explicit address), `sharded_trainer` shards a plain model in place and builds the `Trainer` on
it (the optimizer over the sharded parameters), `train` runs RL steps on the batches every rank
is given (the whole batch each; `parallelize` says how the work is split) and saves sharded
checkpoints with torch.distributed.checkpoint, one folder per step, which `load_sharded`
restores exactly (model, optimizer, reference, LR schedule); `export_hf` gathers the full
weights on rank 0 and writes the HF folder the single-process checkpoint writes.

`write_shards` / `read_shards` are the part a checkpoint folder of `tempering train` shares:
with `runtime.trainer_ranks` > 1 and `runtime.checkpoint_format = "sharded"`, `group` orders
every rank to write its shards into the run's checkpoint folder (rank 0 adds the HF model, RNG
states and run state as `checkpoint.save_checkpoint` does), and a resume reads them back at
another number of ranks or another layout (tp, dp, pp), or in one process: DCP reshards on load.
A pipeline's stages write their own parameters under their plain names; the last stage's copy of
a tied head writes its optimizer state as the embedding's (the name a single process uses). All ranks write one checkpoint
folder, so on several nodes it must be on a shared filesystem. Each rank builds its full model
before sharding (no meta-device loading of large checkpoints yet), and RNG states are not
sharded (the RL step draws no random numbers; rank 0's are saved with the run).
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Iterable

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_model_state_dict, get_state_dict,
                                                     set_model_state_dict, set_state_dict)
from torch.distributed.checkpoint.stateful import Stateful

from tempering.config import AlgorithmConfig, ParallelizeConfig, TrainerConfig
from tempering.jsonvalue import JSONObject
from tempering.models import Decoder, save_hf
from tempering.records import Batch
from tempering.tokenizer import Tokenizer
from tempering.trainer.checkpoint import point_latest
from tempering.trainer.mesh import build_mesh, device_type, mesh_shape
from tempering.trainer.parallelize import Ranks, mixed_precision
from tempering.trainer.stage_state import EMBED, HEAD, full_weights, holds_copy
from tempering.trainer.step import StepStats, Trainer


def init_ranks(backend: str | None = None, address: str | None = None, rank: int | None = None,
               world: int | None = None, timeout_s: float = 600.0,
               parallelize: ParallelizeConfig = ParallelizeConfig()) -> Ranks:
    """Join the group: from RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT, or `address`
    ("host:port") with `rank` and `world`, and lay it out as `parallelize` says (`mesh`). NCCL
    on CUDA (the device is LOCAL_RANK's; `parallelize.device`), gloo on CPU or when `backend`
    says so. A collective that waits longer than `timeout_s` fails instead of hanging."""
    cuda = backend != "gloo" and device_type(parallelize) == "cuda"
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    init = f"tcp://{address}" if address else None  # None: env://
    dist.init_process_group(backend or ("nccl" if cuda else "gloo"), init_method=init,
                            rank=-1 if rank is None else rank, world_size=-1 if world is None else world,
                            timeout=timedelta(seconds=timeout_s), device_id=device if cuda else None)
    shape = mesh_shape(parallelize, dist.get_world_size())
    return Ranks(build_mesh(shape, device.type), mixed_precision(device), shape)


def sharded_trainer(model: Decoder, ranks: Ranks, cfg: TrainerConfig, algo: AlgorithmConfig | None = None,
                    **kwargs: float) -> Trainer:
    """Shard `model` in place, then the trainer over it (`kwargs`: the `Trainer`'s own numbers: temperature, norm_tokens, total_steps)."""
    return Trainer(ranks.shard(model), cfg, algo, ranks=ranks, **kwargs)


def train(trainer: Trainer, batches: Iterable[Batch], run_dir: Path, save_every: int = 0,
          start_step: int = 0) -> list[StepStats]:
    """An RL step per batch (steps numbered on from `start_step`), a sharded checkpoint every
    `save_every` steps (0: none)."""
    stats = []
    for step, batch in enumerate(batches, start=start_step + 1):
        stats.append(trainer.rl_step(batch))
        if save_every and step % save_every == 0:
            save_sharded(run_dir, trainer, {"step": step})
    return stats


@dataclass
class _Shards(Stateful):
    """What DCP writes and reads: the model's, optimizer's and reference's shards, by name."""

    trainer: Trainer

    def state_dict(self) -> dict[str, dict]:
        model, optimizer = get_state_dict(self.trainer.model, self.trainer.optimizer)
        # a pipeline's copy of a tied head steps as the embedding: its optimizer state is that one
        state = {"model": model, "optimizer": _renamed(optimizer, self._copy_names())}
        if self.trainer.reference is not None:
            state["reference"] = get_model_state_dict(self.trainer.reference)
        return state

    def load_state_dict(self, state: dict[str, dict]) -> None:
        back = {v: k for k, v in self._copy_names().items()}
        set_state_dict(self.trainer.model, self.trainer.optimizer, model_state_dict=state["model"],
                       optim_state_dict=_renamed(state["optimizer"], back))
        if "reference" in state and self.trainer.reference is not None:
            set_model_state_dict(self.trainer.reference, state["reference"])


    def _copy_names(self) -> dict[str, str]:
        return {HEAD: EMBED} if holds_copy(self.trainer.model) else {}


def _renamed(optimizer: dict, names: dict[str, str]) -> dict:
    """An optimizer state dict (keyed by parameter name) with the parameters `names` renames."""
    if not names:
        return optimizer
    return {"state": {names.get(k, k): v for k, v in optimizer["state"].items()},
            "param_groups": [{**g, "params": [names.get(n, n) for n in g["params"]]} for g in optimizer["param_groups"]]}


def save_sharded(run_dir: Path, trainer: Trainer, state: JSONObject) -> Path:
    """`run_dir/checkpoints/step-NNNNNN/`: the trainer's shards (`write_shards`) and `state.json`
    (the run state). Written under a temporary name and renamed by rank 0 once every rank is
    done, then `latest` points at it (as `checkpoint.latest_checkpoint` reads it)."""
    root = run_dir / "checkpoints"
    final = root / f"step-{state['step']:06d}"
    tmp = root / f".tmp-{final.name}"
    if dist.get_rank() == 0:
        shutil.rmtree(tmp, ignore_errors=True)
    dist.barrier()
    write_shards(tmp, trainer)
    if dist.get_rank() == 0:
        (tmp / "state.json").write_text(json.dumps(state, indent=2))
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
        point_latest(root, final.name)
    dist.barrier()
    return final


def load_sharded(path: Path, trainer: Trainer) -> JSONObject:
    """Restore a `save_sharded` folder into `trainer` -> the run state."""
    read_shards(path, trainer)
    return json.loads((path / "state.json").read_text())


def write_shards(folder: Path, trainer: Trainer) -> None:
    """Collective: `folder/sharded/` (DCP: every rank writes its own shards of the model,
    optimizer and reference; nothing is gathered) and, from rank 0, `folder/shards.json` (the LR
    schedule, whether there is a reference, the number of ranks). Returns once every rank's
    shards are written, so rank 0 may rename the folder."""
    dcp.save({"trainer": _Shards(trainer)}, checkpoint_id=folder / "sharded")
    if dist.get_rank() == 0:
        meta = {"scheduler": trainer.scheduler.state_dict(), "reference": trainer.reference is not None,
                "ranks": dist.get_world_size()}
        (folder / "shards.json").write_text(json.dumps(meta, indent=2))
    dist.barrier()


def read_shards(folder: Path, trainer: Trainer) -> None:
    """Restore a `write_shards` folder into `trainer`: each rank reads the shards it holds now,
    whatever the number of ranks that wrote them, or a single-process `Trainer` (no process
    group: DCP then reads the full tensors). Collective when there is a group."""
    meta = json.loads((folder / "shards.json").read_text())
    if meta["reference"] and trainer.algo.kl_coef > 0 and trainer.reference is None:
        trainer.reference = trainer._frozen_copy()  # then overwritten with the saved one
    dcp.load({"trainer": _Shards(trainer)}, checkpoint_id=folder / "sharded", no_dist=not dist.is_initialized())
    # after the optimizer: its param groups brought back the LR the schedule had set
    trainer.scheduler.load_state_dict(meta["scheduler"])


def export_hf(model: Decoder, folder: Path, tokenizer: Tokenizer | None = None, ranks: Ranks | None = None) -> None:
    """The full weights gathered on rank 0 and written as an HF folder (`save_hf`, plus the
    tokenizer when given), as the single-process checkpoint's `model/`; with pipeline stages
    (`ranks`), every stage's."""
    if ranks is not None and ranks.shape.pp > 1:
        full = full_weights(model, ranks)
    else:
        full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if dist.get_rank() == 0:
        with torch.device("meta"):
            plain = Decoder(model.arch)
        plain.load_state_dict(full, assign=True)  # a tied lm_head comes as its own key; save_hf drops it
        save_hf(plain, folder)
        if tokenizer is not None:
            tokenizer.save(folder)
    dist.barrier()
