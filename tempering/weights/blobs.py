"""`BlobPublisher` / `BlobReceiver`: versioned policy weights through the runtime's blobs, for
engine replicas on any node of a cluster (`runtime.ray`: the object store).

`publish` puts the model's distinct tensors in one blob per version (`runtime.put_blob`: out of
band, never pickled) and announces (version, blob) on every replica's channel, an unbounded
queue of the runtime. It waits for no replica: one that died or lags holds up neither the
trainer nor the others, which a collective broadcast cannot promise (a gloo group that loses a
member fails as a whole). A replica's `BlobReceiver` takes announcements in a thread of its own
and keeps the newest, so `version` is a plain read and `pull` loads the newest into the engine
(`engine.load_weights` copies from the blob's read-only views). A version nobody holds any more
is freed by the runtime. Unlike `WeightStore` and the broadcast, a replica holds a version a
moment after `publish` returns, not when it returns: whoever needs a given version waits for it
(`rollout.worker` does before an evaluation). Which replicas exist is the caller's to say
(`channel`, `drop`); this module detects no failure.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import torch

from tempering.engine import LLM
from tempering.models import Decoder
from tempering.runtime import Blob, Queue, Runtime
from tempering.weights.layout import distinct
from tempering.weights.sync import PublishStats, Received

SLICE_S = 0.2  # a receiver's longest wait for an announcement before it looks at its stop flag
Announcement = tuple[int, Blob[dict[str, torch.Tensor]]]  # (version, its weights)


@dataclass(frozen=True)
class BlobChannel:
    """Where one replica hears of new versions; picklable, opened in the replica's process."""

    queue: Queue[Announcement]
    replica: str
    timeout_s: float  # the deadline of fetching one version's blob

    def open(self) -> "BlobReceiver":
        return BlobReceiver(self)


class BlobPublisher:
    """The trainer's side (a `WeightPublisher`)."""

    def __init__(self, runtime: Runtime, timeout_s: float):
        self.runtime, self.timeout = runtime, timeout_s
        self.channels: dict[str, Queue[Announcement]] = {}
        self._latest: Announcement | None = None
        self.stats = PublishStats()

    @property
    def version(self) -> int:
        return -1 if self._latest is None else self._latest[0]

    def channel(self, replica: str) -> BlobChannel:
        """A new replica's channel; it hears of the version published last at once."""
        q = self.runtime.queue(0, f"weights for {replica}")
        if self._latest is not None:
            q.put(self._latest, self.timeout, f"weights for {replica}")
        self.channels[replica] = q
        return BlobChannel(q, replica, self.timeout)

    def drop(self, replica: str) -> None:
        """Announce nothing more to `replica` (it left); what its channel holds is let go."""
        q = self.channels.pop(replica, None)
        if q is not None:
            q.drain()

    @torch.no_grad()
    def publish(self, model: Decoder, version: int) -> None:
        start = time.perf_counter()
        state = distinct(model.state_dict())
        blob = self.runtime.put_blob(state)
        self._latest = (version, blob)
        for replica, q in self.channels.items():
            q.put(self._latest, self.timeout, f"weights for {replica}")
        self.stats.publishes += 1
        self.stats.seconds += time.perf_counter() - start
        self.stats.bytes += sum(t.nbytes for t in state.values())


class BlobReceiver:
    """A replica's side (a `WeightSource`)."""

    def __init__(self, channel: BlobChannel):
        self.channel = channel
        self.received = Received()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"weights {channel.replica}", daemon=True)
        self._thread.start()

    @property
    def version(self) -> int:
        return self.received.version

    def pull(self, engine: LLM) -> bool:
        """Load the newest received weights into `engine` if they are newer; True when it did."""
        return self.received.pull(engine)

    @property
    def fetch_s(self) -> float:
        return self.received.fetch_s

    def close(self) -> None:
        self._stop.set()
        self._thread.join(SLICE_S + self.channel.timeout_s)

    def _run(self) -> None:
        # no deadline on the next announcement: an idle trainer (warm-up, evaluation) is no fault
        component = f"rollout replica {self.channel.replica} (weights)"
        newest = None
        try:
            while not self._stop.is_set():
                got, item = self.channel.queue.try_get(SLICE_S, component)
                while got:  # only the newest of the versions announced meanwhile is fetched
                    newest = item
                    got, item = self.channel.queue.try_get(0.0, component)
                if newest is not None:
                    (version, blob), newest = newest, None
                    start = time.perf_counter()
                    state = blob.get(self.channel.timeout_s, component)
                    self.received.fetch_s += time.perf_counter() - start
                    with self.received.lock:
                        self.received.set(state, version)
        except BaseException as e:  # noqa: BLE001 - surfaces at the engine's next look at `version`
            self.received.fail(e)
