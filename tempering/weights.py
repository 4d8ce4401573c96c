"""`WeightStore`: versioned policy weights in shared memory, published by the trainer and pulled
by engines in other processes; `EngineSync`: when an engine loads them, and what that costs.

One copy of every tensor lives in shared memory; `publish` writes it and bumps the version under
a lock, `pull` copies it into an engine when the version is newer. Readers never see a half-
written version. The lock covers one copy and nothing else (the trainer takes its state_dict
before it, the engine's check for a newer version reads no lock), so the engine waits for the
trainer at most one copy and a pull with nothing new costs one integer read.

`EngineSync` is the rollout worker's policy (`rollout.partial_rollouts`): load at once (running
requests are recomputed under the new weights, their earlier tokens keep their versions), or
hold admission, let the requests in flight finish under their weights, then load. Its drain
ends when they finish (each is bounded by its max_tokens), and a drain longer than the stall
deadline is reported as a stall. Broadcast over gloo/NCCL for multi-node runs lives in the Ray
runtime.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import torch

from tempering.engine import LLM
from tempering.models import Decoder
from tempering.runtime import Stall


class WeightStore:
    def __init__(self, model: Decoder, ctx: Any):
        # state_dict lists a tied lm_head under its own name too; the engine's model ties it the
        # same way, so one shared copy of each storage is enough (the embedding is the largest).
        self.tensors = {k: v.detach().clone().share_memory_() for k, v in _distinct(model.state_dict()).items()}
        # Written only under _lock; read without it as a hint (an 8-byte aligned read is atomic),
        # then again under the lock before anything is copied.
        self._version = ctx.Value("q", -1, lock=False)
        self._lock = ctx.Lock()

    @property
    def version(self) -> int:
        return self._version.value

    @torch.no_grad()
    def publish(self, model: Decoder, version: int) -> None:
        """Copy `model`'s weights in and make them `version` (at once, under the lock)."""
        state = model.state_dict()  # outside the lock: the engine waits for the copy only
        with self._lock:
            for k, t in self.tensors.items():
                t.copy_(state[k])
            self._version.value = version

    def pull(self, engine: LLM) -> bool:
        """Load the published weights into `engine` if they are newer; True when it did."""
        if self._version.value <= engine.version:
            return False  # the common case: no lock, no copy
        with self._lock:
            engine.load_weights(self.tensors, self._version.value)
        return True


@dataclass
class SyncStats:
    """Weight loads on an engine's side, summed since it started."""

    syncs: int = 0  # versions loaded (a version published during a drain may be skipped)
    pull_s: float = 0.0  # inside `pull`: waiting for the lock, the copy, the preemption
    drain_s: float = 0.0  # partial_rollouts off: from a newer version seen to the start of its pull

    def minus(self, earlier: "SyncStats") -> "SyncStats":
        return SyncStats(self.syncs - earlier.syncs, self.pull_s - earlier.pull_s, self.drain_s - earlier.drain_s)


class EngineSync:
    """Brings `engine` to the store's newest version, by `partial` rollouts or by a drain."""

    def __init__(self, store: WeightStore, engine: LLM, partial: bool, drain_deadline_s: float = float("inf")):
        self.store, self.engine, self.partial = store, engine, partial
        self.deadline_s = drain_deadline_s
        self.stats = SyncStats()
        self._seen: float | None = None  # when a drain began

    @property
    def draining(self) -> bool:
        return self._seen is not None

    def poll(self) -> bool:
        """Call between engine steps. Load the newest weights if the mode allows it now (a drain
        starts or goes on otherwise). -> True when a version was loaded."""
        if self.store.version <= self.engine.version:
            return False
        start = time.perf_counter()
        if not self.partial:
            if self._seen is None:
                self._seen = start
                self.engine.hold_admission()
            if self.engine.in_flight:
                if start - self._seen > self.deadline_s:
                    raise Stall(f"engine: {self.engine.in_flight} sequences still running {self.deadline_s:g} s "
                                "after a weight sync began draining them")
                return False
        loaded = self.store.pull(self.engine)
        self.stats.pull_s += time.perf_counter() - start
        if self._seen is not None:
            self.stats.drain_s += start - self._seen
            self._seen = None
        self.stats.syncs += loaded
        return loaded


def _distinct(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    seen, out = set(), {}
    for name, tensor in state.items():
        if tensor.data_ptr() not in seen:
            seen.add(tensor.data_ptr())
            out[name] = tensor
    return out
