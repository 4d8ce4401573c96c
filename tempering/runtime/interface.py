"""The runtime boundary as protocols, and what both runtimes share: their errors, a worker's
resource request, a worker's failure as a record, and the deadline loop of a bounded queue.

`Runtime` is what `runtime.local` (processes on this machine) and `runtime.ray` (actors on a
cluster) both are: `queue(maxsize)` gives a bounded `Queue[T]` whose waits have deadlines,
`event(name)` an `Event` workers can set and wait for, `spawn(name, target, *args,
resources=...)` a `WorkerHandle` (`check`, `started`, `placed`, `alive`, `join`), and
`put_blob(obj)` a `Blob`, a snapshot (a state dict's tensors kept out of pickles) any worker
can `get`; `host` is where workers reach the process that holds the runtime (a rendezvous), and
`remote` whether queue calls cross the network. Nothing here starts a process or imports Ray.
"""

from __future__ import annotations

import time
import traceback
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Generic, Mapping, Protocol, Sequence, TypeVar, runtime_checkable

import torch

from tempering.errors import UserError

if TYPE_CHECKING:  # only the Ray runtime makes placement groups; importing it here would import Ray
    from tempering.runtime.ray import SlotGroup

SLICE_S = 0.2  # how often a waiting queue looks at its stop event and the workers it depends on
T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)


class Stall(RuntimeError):
    """A wait ran past its deadline; the message names the component that stalled."""


class WorkerFailed(RuntimeError):
    """A worker raised or died. `bad_input` is true when it raised `UserError` (input the user
    must fix, whose message says it all); otherwise `traceback` is what to read. `died` is true
    when its process or node went away (nothing it raised): work it held can run elsewhere."""

    def __init__(self, worker: str, message: str, traceback: str = "", bad_input: bool = False, died: bool = False):
        super().__init__(f"worker {worker}: {message}")
        self.worker, self.traceback, self.bad_input, self.died = worker, traceback, bad_input, died


@dataclass(frozen=True)
class Failure:
    """What a worker raised, as it travels back to the process that waits for it."""

    bad_input: bool
    message: str
    traceback: str

    @staticmethod
    def of(error: BaseException) -> "Failure":
        """Call inside the `except` block, so that the traceback is the one being handled."""
        return Failure(isinstance(error, UserError), f"{type(error).__name__}: {error}", traceback.format_exc())

    def error(self, worker: str) -> WorkerFailed:
        return WorkerFailed(worker, self.message, self.traceback, self.bad_input)


@dataclass(frozen=True)
class Resources:
    """What a worker asks of the machine it runs on. The Ray runtime places the worker where
    they are free (custom resources such as {"slot": 4} or {"node_a": 1} name what a node
    offers; `group` and `bundle` put it in a placement group's reservation); the local runtime
    runs every worker on this machine and reserves nothing."""

    cpus: float = 1.0
    custom: dict[str, float] = field(default_factory=dict)
    group: SlotGroup | None = None  # a placement group from the runtime that spawns the worker (Ray's)
    bundle: int = -1  # the group's bundle to run in; -1: any of them


def is_state_dict(obj: object) -> bool:
    """A blob whose tensors the runtimes move without pickling them: a non-empty mapping of tensors."""
    return isinstance(obj, Mapping) and bool(obj) and all(isinstance(v, torch.Tensor) for v in obj.values())


class StopSignal(Protocol):
    """What a wait looks at to give up early: an `Event`, or the run's `StopRequest`."""

    def is_set(self) -> bool: ...


@runtime_checkable
class Event(Protocol):
    """An event set in one process and seen in others."""

    def set(self) -> None: ...

    def clear(self) -> None: ...

    def is_set(self) -> bool: ...

    def wait(self, timeout: float) -> bool: ...


@runtime_checkable
class WorkerHandle(Protocol):
    """A spawned worker as the process that spawned it sees it."""

    def check(self) -> None: ...  # raises WorkerFailed if it raised or died

    def started(self, timeout: float) -> str: ...  # where it runs, once it does

    def placed(self) -> bool: ...

    def alive(self) -> bool: ...

    def join(self, timeout: float) -> None: ...


@runtime_checkable
class Blob(Protocol[T_co]):
    """A snapshot `put_blob` made; `get` gives the object in any process."""

    def get(self, timeout: float, component: str) -> T_co: ...


class DeadlineQueue(ABC, Generic[T]):
    """A bounded FIFO queue of `T`s whose waits end at a deadline (`Stall`), when a `stop` event is
    set, or when a worker the waiter depends on has failed (`WorkerFailed`). Implementations give
    the two primitive waits of at most one slice each."""

    @abstractmethod
    def _offer(self, item: T, wait: float, component: str) -> bool:
        """Put `item` if there is room within `wait` seconds; False otherwise."""

    @abstractmethod
    def _take(self, wait: float, component: str) -> tuple[bool, T | None]:
        """(True, the next item) if one arrives within `wait` seconds; (False, None) otherwise."""

    @abstractmethod
    def try_put(self, item: T) -> bool:
        """Put without waiting; False when the queue is full."""

    def try_get(self, wait: float = 0.0, component: str = "queue") -> tuple[bool, T | None]:
        """(True, the next item) if one is there or arrives within `wait` seconds; (False, None)
        otherwise. For loops that do other work between looks (`get` waits for an item)."""
        return self._take(wait, component)

    @abstractmethod
    def drain(self) -> None:
        """Throw away every item in the queue now, at the end of its use: items this process
        put that are still on their way may be thrown away too (its exit does not wait to
        deliver them to a reader that is gone)."""

    def put(self, item: T, timeout: float, component: str, stop: StopSignal | None = None) -> bool:
        """Block until there is room; False if `stop` was set meanwhile."""
        deadline = time.monotonic() + timeout
        while not self._offer(item, SLICE_S, component):
            if stop is not None and stop.is_set():
                return False
            if time.monotonic() > deadline:
                raise Stall(f"{component}: queue stayed full for {timeout:g} s")
        return True

    def get(self, timeout: float, component: str, workers: Sequence[WorkerHandle] = (),
            stop: StopSignal | None = None) -> T | None:
        """The next item; None if `stop` was set meanwhile."""
        deadline = time.monotonic() + timeout
        while True:
            got, item = self._take(SLICE_S, component)
            if got:
                return item
            if stop is not None and stop.is_set():
                return None
            for w in workers:
                w.check()
            if time.monotonic() > deadline:
                raise Stall(f"{component}: nothing arrived for {timeout:g} s")


Queue = DeadlineQueue  # `Queue[T]`: what `Runtime.queue` gives


@runtime_checkable
class Runtime(Protocol):
    """Where workers run and how they talk: `runtime.local.LocalRuntime`, `runtime.ray.RayRuntime`."""

    remote: bool  # queue and event calls cross the network (each costs a call)
    host: str  # where workers reach the process holding the runtime

    def queue(self, maxsize: int, name: str = "queue") -> Queue[T]: ...  # its items' type is the caller's

    def event(self, name: str = "event") -> Event: ...

    def spawn(self, name: str, target: Callable[..., None], *args: object,
              resources: Resources | None = None) -> WorkerHandle: ...

    def has_room(self, resources: Resources | None = None) -> bool: ...

    def put_blob(self, obj: T) -> Blob[T]: ...

    def close(self) -> None: ...
