"""The two sides of a weight sync as protocols, what a sync costs on each side, and `EngineSync`:
when an engine loads the newest weights.

`WeightPublisher` is the trainer's side (`publish(model, version)`), `WeightSource` the engine's
(`version`, `pull(engine)`); `Received` is what the sources that receive in a thread of their
own (blobs, broadcast) hold for the engine's thread. `store.WeightStore` (shared memory on one machine) and
`broadcast.BroadcastPublisher` / `broadcast.BroadcastReceiver` (a torch.distributed group across
processes and nodes) implement them; `EngineSync` works over any `WeightSource`.

`EngineSync` is the rollout worker's policy (`rollout.partial_rollouts`): load at once (running
requests are recomputed under the new weights, their earlier tokens keep their versions), or
hold admission, let the requests in flight finish under their weights, then load. Its drain
ends when they finish (each is bounded by its max_tokens), and a drain longer than the stall
deadline is reported as a stall.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, fields
from typing import Mapping, Protocol, runtime_checkable

import torch

from tempering.engine import LLM
from tempering.models import Decoder
from tempering.runtime import Stall
from tempering.weights.layout import distinct

MB = 1e6  # bytes per MB in the rates below


@dataclass
class PublishStats:
    """Publishes on the trainer's side, summed since the publisher was made."""

    publishes: int = 0
    seconds: float = 0.0  # inside `publish`: the copy out of the model and, for a broadcast, every replica's receipt
    bytes: int = 0  # what crossed: one copy of the distinct tensors per publish

    def minus(self, earlier: "PublishStats") -> "PublishStats":
        return PublishStats(*(getattr(self, f.name) - getattr(earlier, f.name) for f in fields(self)))

    @property
    def mb_per_s(self) -> float:
        return self.bytes / MB / self.seconds if self.seconds > 0 else 0.0


@dataclass
class SyncStats:
    """Weight loads on an engine's side, summed since it started."""

    syncs: int = 0  # versions loaded (a version published during a drain may be skipped)
    pull_s: float = 0.0  # inside `pull`: waiting for the lock, the copy, the preemption
    drain_s: float = 0.0  # partial_rollouts off: from a newer version seen to the start of its pull
    bytes: int = 0  # copied into the engine: its distinct tensors once per version loaded
    fetch_s: float = 0.0  # off the engine's thread: bringing versions in (a blob's download, a broadcast)

    def minus(self, earlier: "SyncStats") -> "SyncStats":
        return SyncStats(*(getattr(self, f.name) - getattr(earlier, f.name) for f in fields(self)))

    @property
    def mb_per_s(self) -> float:
        return self.bytes / MB / self.pull_s if self.pull_s > 0 else 0.0


@runtime_checkable
class WeightPublisher(Protocol):
    """The trainer's side of a weight sync."""

    stats: PublishStats

    @property
    def version(self) -> int:
        """The version published last (-1 before the first)."""
        ...

    def publish(self, model: Decoder, version: int) -> None:
        """Make `model`'s weights `version`; when it returns, every engine side can pull them."""
        ...


@runtime_checkable
class WeightSource(Protocol):
    """The engine's side of a weight sync."""

    @property
    def version(self) -> int:
        """The newest version this side can load now. Cheap (read between engine steps), never
        waits for the trainer; raises the sync's error if it has failed."""
        ...

    def pull(self, engine: LLM) -> bool:
        """Load the newest weights into `engine` (`engine.load_weights`) if they are newer than
        its version; True when it did."""
        ...

    @property
    def fetch_s(self) -> float:
        """Seconds spent bringing versions to this side off the engine's thread, summed (0 where
        the engine reads them from shared memory)."""
        ...


class Received:
    """The newest weights a receiving thread has taken in (`state` at `version`), under `lock`,
    for the engine's thread to load; the receiving thread's failure is kept (`fail`) and raised
    at the engine's next look at `version`."""

    def __init__(self, state: Mapping[str, torch.Tensor] | None = None):
        self.lock = threading.Lock()
        self.state = state
        self._version = -1
        self._error: BaseException | None = None
        self.fetch_s = 0.0  # the receiving thread's time taking versions in, summed

    @property
    def version(self) -> int:
        if self._error is not None:
            raise self._error
        return self._version

    def set(self, state: Mapping[str, torch.Tensor] | None, version: int) -> None:
        """Under `lock`: `state` (None: the one held, filled in place) is `version` from now on."""
        if state is not None:
            self.state = state
        self._version = version

    def fail(self, error: BaseException) -> None:
        self._error = error

    def pull(self, engine: LLM) -> bool:
        """Load the newest received weights into `engine` if they are newer; True when it did."""
        if self.version <= engine.version:
            return False  # the common case: no lock, no copy
        with self.lock:
            engine.load_weights(self.state, self._version)
        return True


class EngineSync:
    """Brings `engine` to the source's newest version, by `partial` rollouts or by a drain."""

    def __init__(self, store: WeightSource, engine: LLM, partial: bool, drain_deadline_s: float = float("inf")):
        self.store, self.engine, self.partial = store, engine, partial
        self.deadline_s = drain_deadline_s
        self.stats = SyncStats()
        self._seen: float | None = None  # when a drain began
        self._bytes = sum(t.nbytes for t in distinct(engine.model.state_dict()).values())

    @property
    def draining(self) -> bool:
        return self._seen is not None

    def poll(self) -> bool:
        """Call between engine steps. Load the newest weights if the mode allows it now (a drain
        starts or goes on otherwise). -> True when a version was loaded."""
        self.stats.fetch_s = self.store.fetch_s
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
        self.stats.bytes += self._bytes * loaded
        return loaded
