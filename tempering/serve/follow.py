"""`RunFollower`: a training run's weights as they are published to its run directory, for an
engine in another process (`tempering serve --follow RUN_DIR`).

What a run publishes on disk is its checkpoints (`checkpoints/latest`, each with the HF model
folder and `state.json`, whose `version` is the policy version of those weights); they come as
often as `run.checkpoint_every` says. A thread of its own looks at the pointer every `poll_s`
seconds and reads a newer checkpoint's model there, off the engine's thread; the engine's side
is a `WeightSource` (`version`, `pull`), so `EngineSync` decides when it loads. A checkpoint
whose tensors do not fit the served model (another architecture) is reported once on stderr
and skipped: serving goes on with the weights it has. It never writes to the run directory.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path
from typing import Mapping

import torch

from tempering.engine import LLM
from tempering.errors import UserError
from tempering.models import load_hf
from tempering.trainer.checkpoint import latest_checkpoint
from tempering.weights.layout import distinct
from tempering.weights.sync import Received


def checkpoint_version(path: Path) -> int:
    """The policy version of a checkpoint's weights (its state.json's `version`)."""
    state = json.loads((path / "state.json").read_text())
    return int(state.get("version", state.get("step", 0)))


class RunFollower:
    def __init__(self, run_dir: str | Path, shapes: Mapping[str, torch.Size], poll_s: float = 2.0):
        """`shapes`: the served model's tensors (what a checkpoint must match)."""
        self.run_dir = Path(run_dir)
        if not self.run_dir.is_dir():
            raise UserError(f"--follow {run_dir}: no such run directory")
        self._shapes, self.poll_s = dict(shapes), poll_s
        self._received = Received()
        self._skipped: set[str] = set()
        self._stop = threading.Event()
        self.loads = 0  # checkpoints read so far
        self._thread = threading.Thread(target=self._loop, name="follow-run", daemon=True)

    def start(self) -> "RunFollower":
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        self._thread.join(max(self.poll_s, 1.0) * 2)

    @property
    def version(self) -> int:
        return self._received.version

    @property
    def fetch_s(self) -> float:
        return self._received.fetch_s

    def pull(self, engine: LLM) -> bool:
        return self._received.pull(engine)

    def check_now(self) -> bool:
        """Look at the run's latest checkpoint once (the thread does every poll_s). -> True when
        it read a newer one."""
        path = latest_checkpoint(self.run_dir)
        if path is None or path.name in self._skipped:
            return False
        try:
            version = checkpoint_version(path)
        except (OSError, ValueError) as e:  # being replaced as we read: the next look sees the new one
            print(f"[tempering] follow: {path}: unreadable state.json ({e}); looking again later", file=sys.stderr)
            return False
        if version <= self._received.version:
            return False
        start = time.perf_counter()
        state = distinct(load_hf(path / "model").state_dict())
        misfit = self._misfit(state)
        if misfit:
            self._skipped.add(path.name)
            print(f"[tempering] follow: {path} does not fit the served model ({misfit}); it is skipped",
                  file=sys.stderr, flush=True)
            return False
        with self._received.lock:
            self._received.set(state, version)
            self._received.fetch_s += time.perf_counter() - start
        self.loads += 1
        return True

    def _misfit(self, state: Mapping[str, torch.Tensor]) -> str:
        for name, tensor in state.items():
            if name not in self._shapes:
                return f"unknown tensor {name}"
            if tensor.shape != self._shapes[name]:
                return f"{name} is {tuple(tensor.shape)}, the model's {tuple(self._shapes[name])}"
        return ""

    def _loop(self) -> None:
        while not self._stop.wait(self.poll_s):
            try:
                self.check_now()
            except (OSError, UserError) as e:  # a checkpoint mid-rename or removed: try again later
                print(f"[tempering] follow: {e}; looking again later", file=sys.stderr, flush=True)
