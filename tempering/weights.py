"""`WeightStore`: versioned policy weights in shared memory, published by the trainer and pulled
by engines in other processes.

One copy of every tensor lives in shared memory; `publish` writes it and bumps the version under
a lock, `pull` copies it into an engine when the version is newer. Readers never see a half-
written version. Broadcast over gloo/NCCL for multi-node runs lives in the Ray runtime.
"""

from __future__ import annotations

from typing import Any

import torch

from tempering.engine import LLM
from tempering.models import Decoder


class WeightStore:
    def __init__(self, model: Decoder, ctx: Any):
        # Tied embeddings appear once in named_parameters; state_dict lists both names.
        self.tensors = {k: v.detach().clone().share_memory_() for k, v in model.state_dict().items()}
        self._version = ctx.Value("q", -1)
        self._lock = ctx.Lock()

    @property
    def version(self) -> int:
        return self._version.value

    @torch.no_grad()
    def publish(self, model: Decoder, version: int) -> None:
        state = model.state_dict()
        with self._lock:
            for k, t in self.tensors.items():
                t.copy_(state[k])
            self._version.value = version

    def pull(self, engine: LLM) -> bool:
        """Load the published weights into `engine` if they are newer; True when it did."""
        if self._version.value <= engine.version:
            return False
        with self._lock:
            engine.load_weights(self.tensors, self._version.value)
        return True
