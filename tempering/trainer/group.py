"""`TrainerGroup`: the RL trainer as `world` processes (FSDP2, tensor or pipeline parallel:
`trainer.parallelize`), led by the calling process.

Rank 0 keeps the run's loop and the plain, full policy (what is checkpointed, and published
unless the ranks publish their own shards) and trains its shard; ranks 1.. are workers of the
run's runtime (local processes or Ray actors) that meet rank 0 at `runtime.host` and follow its
orders, each a collective: `step` (every rank gets the whole batch), `gather` (the full weights
into rank 0's copy), `publish`, `state` (the full trainer state in the single-process format),
and `save` / `load` (each rank's own shards with torch.distributed.checkpoint). Both checkpoint formats resume at another number of ranks and
another layout. Pipeline stages gather their own weights and state (`stage_state`). Given a
`weights` folder, a step gathers nothing: `publish` has every rank write its own shards
(`weights.shards`), and `refresh` gathers rank 0's copy only when it is exported.
A follower that raises ends, and rank 0's next collective fails at the group's deadline naming
it. Followers ignore SIGINT and SIGTERM and exit when rank 0 is gone. Sharded checkpoints over
several nodes need a shared filesystem; nothing here moves batches to a GPU."""

from __future__ import annotations

import copy
import os
import shutil
import socket
import threading
import time
from pathlib import Path
from typing import Callable, TypeVar

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_model_state_dict, get_optimizer_state_dict,
                                                     set_model_state_dict, set_optimizer_state_dict)

from tempering.config import AlgorithmConfig, ConfigError, TrainerConfig
from tempering.models import Arch, Decoder
from tempering.records import Batch
from tempering.runtime import Blob, LocalRuntime, Resources, Runtime, WorkerFailed
from tempering.trainer.distributed import init_ranks, read_shards, write_shards
from tempering.trainer.mesh import mesh_shape
from tempering.trainer.parallelize import Ranks
from tempering.trainer.stage_state import (HEAD, full_state, full_weights, holds_copy, indexed_state, load_stage,
                                           named_state)
from tempering.trainer.step import StepStats, Trainer
from tempering.weights.shards import ShardPublisher

FULL = StateDictOptions(full_state_dict=True, cpu_offload=True)
WATCH_S = 1.0  # how often a follower looks whether rank 0 is still there
T = TypeVar("T")
Order = tuple[str, Batch | Path | int | None]  # what rank 0 tells the followers: ("step", batch), ("save", folder), ...


class TrainerGroup:
    def __init__(self, model: Decoder, trainer: Trainer, world: int, threads: int, timeout_s: float,
                 runtime: Runtime | None = None, resources: Resources | None = None, weights: Path | None = None):
        """`model`: the full policy (kept, and updated after every step, or with `weights` when
        `refresh` asks); `trainer`: the single-process trainer whose configuration and state the
        group starts from; `runtime` spawns ranks 1.. (a `LocalRuntime` when None), each asking
        for `resources` (default: one CPU); `timeout_s` bounds their placement and every
        collective; `weights`: a folder every rank publishes its own shards into (`publisher`)."""
        if world < 2:
            raise ValueError(f"TrainerGroup: world must be >= 2, got {world}")
        shape = mesh_shape(trainer.cfg.parallelize, world)  # a layout that does not fit fails before any rank starts
        if shape.pp > 1 and shape.dp > 1:
            raise ConfigError(f"trainer.parallelize: {shape}: a run's trainer group does not combine pp with data "
                              "parallel yet (pp = runtime.trainer_ranks there; pp x dp runs in distributed.train)")
        self.model, self.world = model, world
        if weights is not None:  # a run resumed: versions its earlier group published are gone
            shutil.rmtree(weights, ignore_errors=True)
        runtime = runtime if runtime is not None else LocalRuntime()
        spec = _Spec(model.arch, trainer.cfg, trainer.algo, trainer.temperature, trainer.norm_tokens,
                     trainer.total_steps, threads, timeout_s, weights)
        self._stale = False  # whether `model` is behind the ranks' weights (per-shard publishing)
        # snapshots: the live model's and optimizer's tensors are stepped in place later
        weights = runtime.put_blob(model.state_dict())
        state = runtime.put_blob(named_state(trainer.state_dict(), model))
        address = f"{runtime.host}:{_free_port()}"
        leader = None if runtime.remote else os.getpid()  # Ray ends a gone driver's actors itself
        ask = resources or Resources()
        self._followers = [runtime.spawn(f"trainer-rank-{r}", _follow, spec, address, r, world, weights, state, leader,
                                         resources=ask) for r in range(1, world)]
        try:
            # where each rank runs (a node id on Ray); one not placed in time is named with its request
            self.nodes = {w.name: w.started(timeout_s) for w in self._followers}
            self.ranks = init_ranks(address=address, rank=0, world=world, timeout_s=timeout_s,
                                    parallelize=trainer.cfg.parallelize)
        except BaseException:
            for w in self._followers:
                w.join(0)
            raise
        # its own copy: the optimizer may keep views of what it loads
        self.trainer = _sharded(spec, self.ranks, weights.get(timeout_s, "trainer rank 0"),
                                copy.deepcopy(state.get(timeout_s, "trainer rank 0")))
        self._shards = _publisher(spec, self.trainer)

    def rl_step(self, batch: Batch) -> StepStats:
        """One RL step on every rank; then `model` holds the new weights (publishing per shard:
        once `refresh` is called)."""
        stats = self._collective(("step", batch), lambda: self.trainer.rl_step(batch))
        if self._shards is None:
            self.model.load_state_dict(self._collective(("gather", None), lambda: _full_weights(self.trainer)))
        self._stale = self._shards is not None
        return stats

    def refresh(self) -> None:
        """Gather the ranks' weights into `model` if it is behind them (before it is exported)."""
        if self._stale:
            self.model.load_state_dict(self._collective(("gather", None), lambda: _full_weights(self.trainer)))
            self._stale = False

    def publisher(self) -> ShardedWeights:
        """The run's `WeightPublisher` when the group was given a `weights` folder: every rank
        writes its own shards of each version, engines read them with `ShardSource(folder)`."""
        assert self._shards is not None, "TrainerGroup.publisher: the group was given no weights folder"
        return ShardedWeights(self, self._shards)

    def publish(self, version: int) -> None:
        """Every rank writes its shards of the current weights as `version` (`ShardPublisher`)."""
        assert self._shards is not None
        shards = self._shards
        self._collective(("publish", version), lambda: shards.publish(self.trainer.model, version))

    def state_dict(self) -> dict[str, dict]:
        """The full trainer state, as the single-process `Trainer.state_dict` gives it."""
        named = self._collective(("state", None), lambda: _full_state(self.trainer))
        return indexed_state(named, self.model)

    def save(self, folder: Path) -> None:
        """Every rank writes its shards into `folder` (`distributed.write_shards`)."""
        self._collective(("save", folder), lambda: write_shards(folder, self.trainer))

    def load(self, folder: Path) -> None:
        """Every rank reads its shards of `folder`; then `model` holds the loaded weights."""
        self._collective(("load", folder), lambda: read_shards(folder, self.trainer))
        self.model.load_state_dict(self._collective(("gather", None), lambda: _full_weights(self.trainer)))
        self._stale = False

    def close(self) -> None:
        """Stop the followers and leave the group."""
        try:
            if all(w.alive() for w in self._followers):
                dist.broadcast_object_list([("stop", None)], src=0)
        finally:
            for w in self._followers:
                w.join(10)
            dist.destroy_process_group()

    def _collective(self, order: Order | None, work: Callable[[], T]) -> T:
        """Send `order` to the followers (None: they are in the same collective already), then do
        `work`, which every rank does too; a failed rank is named."""
        try:
            if order is not None:
                dist.broadcast_object_list([order], src=0)
            return work()
        except Exception as e:
            failed = []
            for w in self._followers:
                try:
                    w.check()
                    if not w.alive():
                        failed.append(f"{w.name}: ended")
                except WorkerFailed as f:
                    failed.append(f"{f}\n{f.traceback}".rstrip())
            if failed:
                raise RuntimeError("trainer group: a rank failed; " + "; ".join(failed)) from e
            raise


class ShardedWeights:
    """A `WeightPublisher` whose `publish` has every rank of `group` write its own shards (the
    `model` given is rank 0's copy, which is not read). `stats`: rank 0's share."""

    def __init__(self, group: TrainerGroup, shards: ShardPublisher):
        self.group, self.stats, self.version = group, shards.stats, -1

    def publish(self, model: Decoder, version: int) -> None:
        self.group.publish(version)
        self.version = version


def _publisher(spec: _Spec, trainer: Trainer) -> ShardPublisher | None:
    """This rank's per-shard publisher, when the group publishes so (a pipeline stage: its plain
    tensors are its own, the copy of a tied head is left out)."""
    if spec.weights is None:
        return None
    stage = trainer.ranks is not None and trainer.ranks.shape.pp > 1
    return ShardPublisher(spec.weights, own=stage, skip=frozenset({HEAD}) if holds_copy(trainer.model) else frozenset())


class _Spec:
    """What every rank builds its trainer from (picklable: it crosses to the spawned ranks)."""

    def __init__(self, arch: Arch, cfg: TrainerConfig, algo: AlgorithmConfig, temperature: float, norm_tokens: int,
                 total_steps: int, threads: int, timeout_s: float, weights: Path | None):
        self.arch, self.cfg, self.algo, self.temperature = arch, cfg, algo, temperature
        self.norm_tokens, self.total_steps, self.threads, self.timeout_s = norm_tokens, total_steps, threads, timeout_s
        self.weights = weights  # the per-shard publishing folder, if any


def _sharded(spec: _Spec, ranks: Ranks, weights: dict[str, torch.Tensor], state: dict[str, dict]) -> Trainer:
    """This rank's trainer: a copy of the full weights, sharded, with the full state's shards."""
    model = Decoder(spec.arch)
    model.load_state_dict(weights)
    trainer = Trainer(ranks.shard(model), spec.cfg, spec.algo, spec.temperature, spec.norm_tokens, spec.total_steps,
                      ranks=ranks)
    if ranks.shape.pp > 1:  # a pipeline stage: its own parameters' share, by name
        load_stage(trainer, ranks, state)
        return trainer
    local = StateDictOptions(full_state_dict=True)
    if state["optimizer"]["state"]:  # a fresh optimizer has nothing to restore
        set_optimizer_state_dict(trainer.model, trainer.optimizer, state["optimizer"], options=local)
    trainer.scheduler.load_state_dict(state["scheduler"])
    if "reference" in state and spec.algo.kl_coef > 0:
        trainer.reference = ranks.frozen_copy(trainer.model)
        set_model_state_dict(trainer.reference, state["reference"], options=local)
    return trainer


def _full_weights(trainer: Trainer) -> dict[str, torch.Tensor] | None:
    """Collective: the full model's weights on rank 0 (every pipeline stage's, or every shard's)."""
    assert trainer.ranks is not None
    if trainer.ranks.shape.pp > 1:
        return full_weights(trainer.model, trainer.ranks)
    return get_model_state_dict(trainer.model, options=FULL)


def _full_state(trainer: Trainer) -> dict[str, dict] | None:
    """Collective: the full trainer state on rank 0, the optimizer's keyed by parameter name."""
    assert trainer.ranks is not None
    if trainer.ranks.shape.pp > 1:
        return full_state(trainer, trainer.ranks)
    state = {"optimizer": get_optimizer_state_dict(trainer.model, trainer.optimizer, options=FULL),
             "scheduler": trainer.scheduler.state_dict()}
    if trainer.reference is not None:
        state["reference"] = get_model_state_dict(trainer.reference, options=FULL)
    return state


def _free_port() -> int:
    """A port free on every interface of this machine (ranks on other nodes connect to it)."""
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def _follow(spec: _Spec, address: str, rank: int, world: int, weights: Blob[dict[str, torch.Tensor]],
            state: Blob[dict[str, dict]], leader: int | None) -> None:
    """A follower rank (a runtime's worker): build its shard, then do what rank 0 orders until
    `stop`. `leader`: rank 0's pid, watched on its machine (None: the runtime ends this rank)."""
    torch.set_num_threads(spec.threads)
    if leader is not None:
        threading.Thread(target=_watch, args=(leader,), daemon=True).start()
    ranks = init_ranks(address=address, rank=rank, world=world, timeout_s=spec.timeout_s,
                       parallelize=spec.cfg.parallelize)
    who = f"trainer rank {rank}"
    trainer = _sharded(spec, ranks, weights.get(spec.timeout_s, who), state.get(spec.timeout_s, who))
    shards = _publisher(spec, trainer)
    del weights, state
    while True:
        order: list[Order | None] = [None]
        dist.broadcast_object_list(order, src=0)
        kind, payload = order[0]
        if kind == "stop":
            break
        if kind == "step":
            trainer.rl_step(payload)
        elif kind == "gather":
            _full_weights(trainer)
        elif kind == "publish":
            assert shards is not None
            shards.publish(trainer.model, payload)
        elif kind == "state":
            _full_state(trainer)
        elif kind == "save":
            write_shards(payload, trainer)
        elif kind == "load":
            read_shards(payload, trainer)
    dist.destroy_process_group()


def _watch(leader: int) -> None:
    while True:
        time.sleep(WATCH_S)
        if os.getppid() != leader:  # rank 0 exited, or was killed: this rank has no one to follow
            os._exit(1)
