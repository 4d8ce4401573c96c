"""`BroadcastPublisher` (the trainer, rank 0) and `BroadcastReceiver` (engine replica i, rank i):
versioned policy weights over a torch.distributed broadcast group of its own (NCCL for weights on
a GPU, gloo otherwise), built on a `TCPStore` the trainer hosts, which is the control channel.

Replicas join by writing their layout to the store; the trainer's first publish waits for all
of them and compares layouts (a mismatch is a `WeightSyncError` naming the replica and tensor).
A publish broadcasts a header and a few flat buckets per dtype (`layout.Layout`) and returns once
every replica acknowledged; each replica receives in a thread of its own, so its engine never
stops generating, and loads through `EngineSync` as from the shared-memory store. The trainer's
waits have the group's deadline; a replica's wait for the next version has none (an idle trainer
is not a fault). The rollout service does not use it (a gloo group fails as a whole when one
member dies); the NCCL path has not run here."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Callable

import torch
import torch.distributed as dist

from tempering.engine import LLM
from tempering.models import Decoder
from tempering.runtime import Stall
from tempering.weights.layout import Layout
from tempering.weights.sync import PublishStats, Received

POLL_S = 0.01  # how often a replica's thread looks for the next announcement (a key read)
HEADER = ("publish number", "version", "layout fingerprint", "elements")


class WeightSyncError(RuntimeError):
    """The two sides of a weight sync disagree, or its group broke; the message names the replica."""


@dataclass(frozen=True)
class BroadcastGroup:
    """Where replicas find the trainer's group: small and picklable, for the replicas' processes."""

    host: str
    port: int
    replicas: int  # ranks 1..replicas; the trainer is 0
    backend: str  # "gloo" or "nccl", from the device of the trainer's weights
    timeout_s: float  # every wait and collective of the group
    bucket_bytes: int


class BroadcastPublisher:
    """The trainer's side (a `WeightPublisher`)."""

    def __init__(self, model: Decoder, replicas: int, host: str = "127.0.0.1", port: int = 0,
                 timeout_s: float = 300.0, bucket_bytes: int = 256 << 20):
        state = model.state_dict()
        self.layout = Layout(state, bucket_bytes)
        self.device = next(iter(state.values())).device
        self._buffers = self.layout.allocate(self.device)
        # wait_for_workers=False: the replicas join later, through `connect`'s deadline
        self._store = dist.TCPStore(host, port, None, True, timedelta(seconds=timeout_s), wait_for_workers=False)
        self.group = BroadcastGroup(host, self._store.port, replicas, _backend(self.device), timeout_s, bucket_bytes)
        self._pg = None
        self._n = 0
        self._version = -1
        self._failed: BaseException | None = None
        self.stats = PublishStats()

    @property
    def version(self) -> int:
        return self._version

    def connect(self) -> None:
        """Wait for every replica to join, check their layouts, form the group (once)."""
        if self._pg is not None:
            return
        deadline = time.monotonic() + self.group.timeout_s
        ranks = range(1, self.group.replicas + 1)
        for r in ranks:
            self._wait(f"joined/{r}", deadline, f"replica {r} did not join")
        problems = [f"replica {r}'s model does not match the trainer's: "
                    + self.layout.difference(json.loads(self._store.get(f"layout/{r}")), "the trainer", f"replica {r}")
                    for r in ranks if self._store.get(f"joined/{r}").decode() != self.layout.fingerprint]
        verdict = "weight sync: " + "; ".join(problems) if problems else "ok"
        self._store.set("group", verdict)
        if problems:
            self._failed = WeightSyncError(verdict)
            raise self._failed
        self._pg = _process_group(self._store, 0, self.group)

    @torch.no_grad()
    def publish(self, model: Decoder, version: int) -> None:
        """Broadcast `model`'s weights as `version`; every replica holds them when this returns."""
        if self._failed is not None:
            raise self._failed
        start = time.perf_counter()
        self.connect()
        self.layout.pack(model.state_dict(), self._buffers)  # a model of another layout: ValueError, nothing sent
        try:
            self._send(version)
        except BaseException as e:
            self._failed = e  # the group's state is unknown now: no later publish may use it
            raise
        self._version = version
        self.stats.publishes += 1
        self.stats.seconds += time.perf_counter() - start
        self.stats.bytes += self.layout.nbytes

    def _send(self, version: int) -> None:
        self._n += 1
        n = self._n
        header = torch.tensor([n, version, self.layout.fingerprint_int, self.layout.numel], device=self.device)
        self._store.set(f"announce/{n}", str(version))
        try:
            _broadcast(self._pg, [header, *self._buffers], self.device)
        except RuntimeError as e:
            raise WeightSyncError(f"weight sync: the broadcast of version {version} failed: {e}") from e
        deadline = time.monotonic() + self.group.timeout_s
        for r in range(1, self.group.replicas + 1):
            self._wait(f"ack/{n}/{r}", deadline, f"replica {r} did not acknowledge version {version}")
        answers = {r: self._store.get(f"ack/{n}/{r}").decode() for r in range(1, self.group.replicas + 1)}
        for key in [f"announce/{n}", *(f"ack/{n}/{r}" for r in answers)]:
            self._store.delete_key(key)  # every replica has read them: keep the store from growing
        problems = [f"replica {r}: {a}" for r, a in answers.items() if a != "ok"]
        if problems:
            raise WeightSyncError("weight sync: " + "; ".join(problems))

    def _wait(self, key: str, deadline: float, what: str) -> None:
        left = deadline - time.monotonic()
        try:
            self._store.wait([key], timedelta(seconds=max(left, 1e-3)))
        except dist.DistStoreError:
            raise Stall(f"weight sync: {what} within {self.group.timeout_s:g} s") from None

    def close(self) -> None:
        """Stop hosting the store; replicas still polling it fail at their next look."""
        self._pg = self._store = None


class BroadcastReceiver:
    """Engine replica `rank`'s side (a `WeightSource`); buffers like `model`'s weights."""

    def __init__(self, group: BroadcastGroup, rank: int, model: Decoder):
        if not 1 <= rank <= group.replicas:
            raise ValueError(f"weight sync: replica rank {rank} is outside 1..{group.replicas}")
        state = model.state_dict()
        self.group, self.rank = group, rank
        self.layout = Layout(state, group.bucket_bytes)
        self.device = next(iter(state.values())).device
        if _backend(self.device) != group.backend:
            raise WeightSyncError(f"weight sync: replica {rank}'s weights are on {self.device}, "
                                  f"but the trainer's group uses {group.backend}")
        self._buffers = self.layout.allocate(self.device)
        self.received = Received(self.layout.views(self._buffers))  # filled in place by each broadcast
        self._stop = threading.Event()
        try:
            self._store = dist.TCPStore(group.host, group.port, None, False, timedelta(seconds=group.timeout_s))
        except RuntimeError as e:
            raise Stall(f"weight sync: replica {rank} could not reach the trainer's store at "
                        f"{group.host}:{group.port} within {group.timeout_s:g} s ({e})") from None
        self._store.set(f"layout/{rank}", json.dumps(self.layout.description))
        self._store.set(f"joined/{rank}", self.layout.fingerprint)
        self._thread = threading.Thread(target=self._run, name=f"weight sync replica {rank}", daemon=True)
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
        """Stop the thread (a receive under way ends first, within the group's timeout)."""
        self._stop.set()
        self._thread.join(self.group.timeout_s)

    def _run(self) -> None:
        try:
            if not self._until(lambda: self._store.check(["group"])):
                return
            verdict = self._store.get("group").decode()
            if verdict != "ok":
                raise WeightSyncError(verdict)
            if self.device.type == "cuda":
                torch.cuda.set_device(self.device)  # the current device is per thread
            pg = _process_group(self._store, self.rank, self.group)
            n = 1
            while self._until(lambda: self._store.check([f"announce/{n}"])):
                self._receive(pg, n)
                n += 1
        except BaseException as e:  # surfaces at the engine's next look at `version`
            self.received.fail(e if isinstance(e, (WeightSyncError, Stall)) else
                               WeightSyncError(f"weight sync: replica {self.rank}: {type(e).__name__}: {e}"))

    def _until(self, ready: Callable[[], bool]) -> bool:
        """Poll `ready` until it holds (True) or `close` is called (False)."""
        while not self._stop.is_set():
            if ready():
                return True
            self._stop.wait(POLL_S)
        return False

    def _receive(self, pg, n: int) -> None:
        version = int(self._store.get(f"announce/{n}"))
        header = torch.zeros(len(HEADER), dtype=torch.int64, device=self.device)
        with self.received.lock:
            # the buckets are received even after a bad header: their sizes were checked at join,
            # and a replica that left the collective would hold the trainer until its timeout
            start = time.perf_counter()
            _broadcast(pg, [header, *self._buffers], self.device)
            self.received.fetch_s += time.perf_counter() - start
            problem = header_problem(header.tolist(), n, version, self.layout)
            if problem is None:
                self.received.set(None, version)
        # before the ack: once the trainer has raised, this side must raise too
        error = WeightSyncError(f"weight sync: replica {self.rank}: {problem}") if problem else None
        if error is not None:
            self.received.fail(error)
        self._store.set(f"ack/{n}/{self.rank}", problem or "ok")
        if error is not None:
            raise error


def header_problem(header: list[int], n: int, version: int, layout: Layout) -> str | None:
    """What is wrong with a received header, or None when it is the expected one."""
    expected = [n, version, layout.fingerprint_int, layout.numel]
    wrong = [f"{name} {got} (expected {want})" for name, got, want in zip(HEADER, header, expected) if got != want]
    return f"header of version {header[1]} does not match: " + ", ".join(wrong) if wrong else None


def _backend(device: torch.device) -> str:
    return "nccl" if device.type == "cuda" else "gloo"


def _process_group(store: dist.TCPStore, rank: int, group: BroadcastGroup):
    prefixed = dist.PrefixStore("weights/", store)
    timeout = timedelta(seconds=group.timeout_s)
    if group.backend == "gloo":
        return dist.ProcessGroupGloo(prefixed, rank, group.replicas + 1, timeout)
    options = dist.ProcessGroupNCCL.Options()
    options._timeout = timeout
    return dist.ProcessGroupNCCL(prefixed, rank, group.replicas + 1, options)


def _broadcast(pg, tensors: list[torch.Tensor], device: torch.device) -> None:
    """Rank 0's `tensors` into everyone's, in order, all in flight at once."""
    options = dist.BroadcastOptions()
    options.rootRank = 0
    for work in [pg.broadcast([t], options) for t in tensors]:
        work.wait()
    if device.type == "cuda":
        torch.cuda.synchronize(device)  # wait() orders the stream only; the buffers must be whole now
