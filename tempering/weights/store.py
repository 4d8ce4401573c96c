"""`WeightStore`: versioned policy weights in shared memory, published by the trainer and pulled
by engines in other processes on the same machine (processes of one multiprocessing context).

One copy of every tensor lives in shared memory; `publish` writes it and bumps the version under
a lock, `pull` copies it into an engine when the version is newer. Readers never see a half-
written version. The lock covers one copy and nothing else (the trainer takes its state_dict
before it, the engine's check for a newer version reads no lock), so the engine waits for the
trainer at most one copy and a pull with nothing new costs one integer read. Across machines,
`broadcast` plays the same two roles.
"""

from __future__ import annotations

import time
from multiprocessing.context import SpawnContext

import torch

from tempering.engine import LLM
from tempering.models import Decoder
from tempering.weights.layout import distinct
from tempering.weights.sync import PublishStats


class WeightStore:
    def __init__(self, model: Decoder, ctx: SpawnContext):
        # state_dict lists a tied lm_head under its own name too; the engine's model ties it the
        # same way, so one shared copy of each storage is enough (the embedding is the largest).
        self.tensors = {k: v.detach().clone().share_memory_() for k, v in distinct(model.state_dict()).items()}
        self.nbytes = sum(t.nbytes for t in self.tensors.values())
        # Written only under _lock; read without it as a hint (an 8-byte aligned read is atomic),
        # then again under the lock before anything is copied.
        self._version = ctx.Value("q", -1, lock=False)
        self._lock = ctx.Lock()
        self.stats = PublishStats()  # the trainer's side only: each process has its own

    @property
    def version(self) -> int:
        return self._version.value

    @property
    def fetch_s(self) -> float:
        return 0.0  # the engine copies from shared memory inside `pull`, which its time covers

    @torch.no_grad()
    def publish(self, model: Decoder, version: int) -> None:
        """Copy `model`'s weights in and make them `version` (at once, under the lock)."""
        start = time.perf_counter()
        state = model.state_dict()  # outside the lock: the engine waits for the copy only
        with self._lock:
            for k, t in self.tensors.items():
                t.copy_(state[k])
            self._version.value = version
        self.stats.publishes += 1
        self.stats.seconds += time.perf_counter() - start
        self.stats.bytes += self.nbytes

    def pull(self, engine: LLM) -> bool:
        """Load the published weights into `engine` if they are newer; True when it did."""
        if self._version.value <= engine.version:
            return False  # the common case: no lock, no copy
        with self._lock:
            engine.load_weights(self.tensors, self._version.value)
        return True
