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
        # state_dict lists a tied lm_head under its own name too; the engine's model ties it the
        # same way, so one shared copy of each storage is enough (the embedding is the largest).
        self.tensors = {k: v.detach().clone().share_memory_() for k, v in _distinct(model.state_dict()).items()}
        self._version = ctx.Value("q", -1)
        self._lock = ctx.Lock()

    @property
    def version(self) -> int:
        return self._version.value

    @torch.no_grad()
    def publish(self, model: Decoder, version: int) -> None:
        """Copy `model`'s weights in and make them `version` (at once, under the lock)."""
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


def _distinct(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    seen, out = set(), {}
    for name, tensor in state.items():
        if tensor.data_ptr() not in seen:
            seen.add(tensor.data_ptr())
            out[name] = tensor
    return out
