"""The Ray runtime: the local runtime's interface on a Ray cluster, plus placement groups for
slot quotas. The only module of Tempering that imports Ray.

`RayRuntime(address)` connects with an explicit address: "local" starts a private instance in a
session of its own (`runtime.ray_head`), so a signal to the trainer's process group (Ctrl-C, a
scheduler's SIGTERM) leaves it running for the run's clean finish; its workers import what this
process imports, as spawned processes do. Anything else is a cluster (HOST:PORT, ray://HOST:PORT
or "auto"), which must answer within a deadline. A worker is an actor placed by its `Resources`
(CPUs, custom resources such as {"slot": 4} or {"node_a": 1}, a placement group's bundle); it
runs its target once, and what the target raises comes back as `WorkerFailed` with the remote
traceback, as does the death of its process or node. Workers and the hub ignore SIGINT and
SIGTERM, as local workers do: the trainer decides how a run ends. Queues and events live in one
asyncio actor on this process's node (the hub), so one process serves all of them and they
outlive any other node. Blobs go through the object store; a state dict's tensors travel as raw
bytes out of band and come back as read-only views of the store, never pickled.

Every remote call and wait has a deadline: a call that gets no answer raises `Stall` naming what
did not answer, a worker not placed in time names its request and what the cluster has free.
It does not restart actors, move weights by broadcast or manage the cluster's nodes.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import sys
import threading
import time
import warnings
from dataclasses import dataclass
from typing import Callable, Generic, Sequence

import numpy as np
import ray
import torch
from ray.actor import ActorHandle
from ray.util.placement_group import PlacementGroup, placement_group, remove_placement_group
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy, PlacementGroupSchedulingStrategy

from tempering.errors import UserError
from tempering.runtime.hub import Hub
from tempering.runtime.interface import DeadlineQueue, Failure, Resources, Stall, T, WorkerFailed, is_state_dict
from tempering.runtime.placement import check_fits_group, describe, fits, shortfall, wanted
from tempering.runtime.ray_head import PrivateHead
from tempering.runtime.stop import SIGNALS

_ERRORS = ray.exceptions
_ANSI = re.compile(r"\x1b\[[0-9;]*m")  # Ray colours the headers of remote tracebacks


def _answer(ref: ray.ObjectRef[T], timeout: float, who: str) -> T:
    """ray.get with a deadline; the errors name `who` did not answer or died."""
    try:
        return ray.get(ref, timeout=timeout)
    except _ERRORS.GetTimeoutError:  # first: it is a RayError too
        raise Stall(f"{who}: no answer within {timeout:g} s") from None
    except _ERRORS.RayTaskError as e:  # raised outside the target (a worker catches the target's own)
        tb = _ANSI.sub("", str(e))  # its last line is the exception, as in any traceback
        raise WorkerFailed(who, tb.strip().splitlines()[-1].strip(), tb, isinstance(e.cause, UserError)) from None
    except _ERRORS.RayError as e:  # its process or node died, or the object is lost with them
        raise WorkerFailed(who, f"died: {_reason(e)}", str(e), died=True) from None


def _reason(error: Exception) -> str:
    """Ray's message without its indented details (ids, pid, ip): what died and why."""
    return " ".join(line.strip() for line in str(error).splitlines() if line.strip() and not line.startswith("\t"))


def _ready(ref: ray.ObjectRef) -> bool:
    return bool(ray.wait([ref], timeout=0)[0])


def _ignore_signals() -> None:
    """In an actor's process: a signal to a cluster node's process group (a `ray start` in a
    terminal) must not end it mid-run; the trainer decides how the run ends (runtime.local's _entry)."""
    if threading.current_thread() is threading.main_thread():  # where an actor's __init__ runs
        for sig in SIGNALS:
            signal.signal(sig, signal.SIG_IGN)


class _QuietHub(Hub):
    def __init__(self):
        _ignore_signals()
        super().__init__()


_HubActor = ray.remote(num_cpus=0, max_restarts=0)(_QuietHub)


@ray.remote(max_restarts=0)
class _WorkerActor:
    def __init__(self):
        _ignore_signals()

    def where(self) -> str:
        return ray.get_runtime_context().get_node_id()

    def run(self, target: Callable[..., None], args: tuple) -> Failure | None:
        try:
            target(*args)
        except BaseException as e:  # noqa: BLE001 - report everything to the waiter, as runtime.local does
            return Failure.of(e)
        return None


class RayWorker:
    def __init__(self, name: str, actor: ActorHandle, target: Callable[..., None], args: tuple, request: Resources,
                 start_timeout: float, call_timeout: float):
        self.name, self._actor = name, actor
        # an actor answers in order: `where` before `run`, which holds it until the target returns;
        # `args` as one argument, since Ray would resolve ObjectRefs among top-level arguments
        self._where, self._node = actor.where.remote(), None
        self._run = actor.run.remote(target, args)
        self._request, self._spawned = request, time.monotonic()
        self._start_timeout, self._call = start_timeout, call_timeout

    def check(self) -> None:
        """Raise `WorkerFailed` if the worker raised or died, `Stall` if it was not placed in time."""
        if self._node is None and not _ready(self._where):
            if time.monotonic() - self._spawned > self._start_timeout:
                raise Stall(self._unplaced(self._start_timeout))
            return
        if _ready(self._run):
            failure = _answer(self._run, self._call, self.name)
            if failure is not None:
                raise failure.error(self.name)

    def started(self, timeout: float) -> str:
        """The id of the node the worker runs on, once it is placed (within `timeout`)."""
        if self._node is None:
            if not ray.wait([self._where], timeout=timeout)[0]:
                raise Stall(self._unplaced(timeout))
            self._node = _answer(self._where, self._call, self.name)
        return self._node

    def placed(self) -> bool:
        """Whether the worker runs on a node now (its `started` answers at once); never waits."""
        return self._node is not None or _ready(self._where)

    def alive(self) -> bool:
        return not _ready(self._run)

    def join(self, timeout: float) -> None:
        ray.wait([self._run], timeout=timeout)
        # finished or stuck, its process and resources go back; a run still pending ends in error
        ray.kill(self._actor, no_restart=True)
        ray.wait([self._run], timeout=self._call)

    def _unplaced(self, timeout: float) -> str:
        asks = wanted(self._request)
        where = "" if self._request.group is None else f" in placement group {self._request.group.name}"
        free = ray.available_resources()  # outside any placement group's reservation
        return (f"worker {self.name}: not placed within {timeout:g} s{where}; it asks for {describe(asks)}, "
                f"free now: {describe({k: free.get(k, 0.0) for k in asks})}")


class RayQueue(DeadlineQueue[T]):
    """A bounded queue in the hub; items cross by value (large ones belong in a blob)."""

    def __init__(self, hub: ActorHandle, qid: int, name: str, call_timeout: float):
        self._hub, self._id, self._name, self._call = hub, qid, name, call_timeout

    def _offer(self, item: T, wait: float, component: str) -> bool:
        # boxed: Ray would resolve an ObjectRef passed as a top-level argument
        return _answer(self._hub.put.remote(self._id, [item], wait), wait + self._call, f"queue of {component}")

    def _take(self, wait: float, component: str) -> tuple[bool, T | None]:
        return _answer(self._hub.get.remote(self._id, wait), wait + self._call, f"queue of {component}")

    def try_put(self, item: T) -> bool:
        return _answer(self._hub.try_put.remote(self._id, [item]), self._call, f"queue {self._name}")

    def drain(self) -> None:
        _answer(self._hub.drain.remote(self._id), self._call, f"queue {self._name}")


class RayEvent:
    """An event in the hub, with the interface of multiprocessing's (waits need a timeout)."""

    def __init__(self, hub: ActorHandle, eid: int, name: str, call_timeout: float):
        self._hub, self._id, self._name, self._call = hub, eid, name, call_timeout

    def set(self) -> None:
        _answer(self._hub.set_event.remote(self._id, True), self._call, f"event {self._name}")

    def clear(self) -> None:
        _answer(self._hub.set_event.remote(self._id, False), self._call, f"event {self._name}")

    def is_set(self) -> bool:
        return _answer(self._hub.wait_event.remote(self._id, 0.0), self._call, f"event {self._name}")

    def wait(self, timeout: float) -> bool:
        return _answer(self._hub.wait_event.remote(self._id, timeout), timeout + self._call, f"event {self._name}")


@dataclass(frozen=True)
class _Tensors:
    """A state dict as flat bytes (numpy arrays go out of band: a get maps them, copying nothing)."""

    arrays: dict[str, tuple[np.ndarray, torch.dtype, tuple[int, ...]]]


class RayBlob(Generic[T]):
    """A snapshot in the object store; it travels to workers by queue or argument."""

    def __init__(self, ref: ray.ObjectRef):
        self._ref = ref

    def get(self, timeout: float, component: str) -> T:
        """The object; a state dict's tensors are read-only views of the object store."""
        value = _answer(self._ref, timeout, f"blob for {component}")
        if not isinstance(value, _Tensors):
            return value
        with warnings.catch_warnings():  # read-only on purpose: the store's memory is shared
            warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
            return {k: torch.from_numpy(a).view(dtype).reshape(shape) for k, (a, dtype, shape) in value.arrays.items()}


@dataclass(frozen=True)
class SlotGroup:
    """A placement group that became ready: its bundles are reserved on the cluster's nodes."""

    name: str
    bundles: tuple[dict[str, float], ...]
    strategy: str
    handle: PlacementGroup


class RayRuntime:
    """Connected to Ray at `address` until `close`. `num_cpus` and `resources` size a private
    instance; `runtime_env` is Ray's (for "local" it defaults to this process's import path).
    Deadlines: the cluster's address must take connections (a private instance start) within
    `connect_timeout_s`, a worker be placed within `start_timeout_s`, and any remote call answer
    within `call_timeout_s` beyond the wait it was asked for. `startup_s`: how long connecting took."""

    remote = True  # every queue or event call is a remote call to the hub (about 1 ms)

    def __init__(self, address: str, *, num_cpus: int | None = None, resources: dict[str, float] | None = None,
                 runtime_env: dict | None = None, connect_timeout_s: float = 60.0, call_timeout_s: float = 30.0,
                 start_timeout_s: float = 120.0):
        if address != "local" and (num_cpus is not None or resources):
            raise ValueError("num_cpus and resources describe a private instance (address 'local'); "
                             "a cluster's nodes declare their own")
        self.call_timeout, self.start_timeout = call_timeout_s, start_timeout_s
        start = time.monotonic()
        self._head: PrivateHead | None = None
        if address == "local":
            auth = _token_auth_as_ray_init()
            self._head = PrivateHead(ray.util.get_node_ip_address(), num_cpus, resources, connect_timeout_s, auth)
        else:
            _probe(address, connect_timeout_s)
        # ray.init makes SIGTERM exit the process at once; the run's StopRequest decides how a run
        # ends (a clean finish after the step), so the handlers this process had are put back
        handlers = {sig: signal.getsignal(sig) for sig in SIGNALS}
        try:
            if self._head is not None:
                paths = os.pathsep.join(p for p in sys.path if p)
                ray.init(address=self._head.address, runtime_env=runtime_env or {"env_vars": {"PYTHONPATH": paths}})
            else:
                ray.init(address=address, runtime_env=runtime_env)
        except BaseException:
            self._stop_head()
            raise
        finally:
            if threading.current_thread() is threading.main_thread():
                for sig, handler in handlers.items():
                    signal.signal(sig, handler)
        try:
            # on this process's node: the queues and events then die with this process only
            home = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
            self._hub = _HubActor.options(scheduling_strategy=home).remote()
            _answer(self._hub.ready.remote(), start_timeout_s, "the runtime's hub (queues and events)")
        except BaseException:
            self.close()  # no half-started runtime left connected, nor its private head
            raise
        # where workers on other nodes reach this process (for a rendezvous): its node's address
        self.host = ray.util.get_node_ip_address()
        self.startup_s = time.monotonic() - start

    def queue(self, maxsize: int, name: str = "queue") -> RayQueue[T]:
        """A queue of at most `maxsize` items (unbounded when it is 0)."""
        qid = _answer(self._hub.new_queue.remote(maxsize), self.call_timeout, f"queue {name}")
        return RayQueue(self._hub, qid, name, self.call_timeout)

    def event(self, name: str = "event") -> RayEvent:
        eid = _answer(self._hub.new_event.remote(), self.call_timeout, f"event {name}")
        return RayEvent(self._hub, eid, name, self.call_timeout)

    def spawn(self, name: str, target: Callable[..., None], *args: object,
              resources: Resources | None = None) -> RayWorker:
        res = resources or Resources()
        options: dict[str, object] = {"num_cpus": res.cpus, "resources": dict(res.custom)}
        if res.group is not None:
            check_fits_group(name, res, res.group.name, res.group.bundles)
            options["scheduling_strategy"] = PlacementGroupSchedulingStrategy(res.group.handle, res.bundle, True)
        actor = _WorkerActor.options(**options).remote()
        return RayWorker(name, actor, target, args, res, self.start_timeout, self.call_timeout)

    def has_room(self, resources: Resources | None = None) -> bool:
        """Whether a worker asking for `resources` would be placed now: they are free in the
        cluster and one live node offers them all (Ray's view, updated within about a second)."""
        ask = wanted(resources or Resources())
        nodes = [n["Resources"] for n in ray.nodes() if n["Alive"]]
        return fits(ask, ray.available_resources()) and any(fits(ask, n) for n in nodes)

    def put_blob(self, obj: T) -> RayBlob[T]:
        """A snapshot of `obj` in the object store (later changes to it do not show)."""
        if is_state_dict(obj):
            flat = {k: v.detach().cpu().contiguous().reshape(-1).view(torch.uint8) for k, v in obj.items()}
            obj = _Tensors({k: (flat[k].numpy(), v.dtype, tuple(v.shape)) for k, v in obj.items()})
        return RayBlob(ray.put(obj))

    def placement_group(self, name: str, bundles: Sequence[dict[str, float]], timeout: float,
                        strategy: str = "PACK") -> SlotGroup:
        """Reserve `bundles` (e.g. one {"CPU": 1, "slot": 4} per sandbox node, strategy SPREAD);
        `Stall` naming the group and what the cluster lacks if they are not ready in `timeout`."""
        bundles = tuple(dict(b) for b in bundles)
        pg = placement_group(list(bundles), strategy=strategy, name=name)
        try:
            ray.get(pg.ready(), timeout=timeout)
        except _ERRORS.GetTimeoutError:
            remove_placement_group(pg)  # a pending group would take the resources once they free up
            raise Stall(f"placement group {name} ({strategy}, bundles {list(bundles)}) not ready within "
                        f"{timeout:g} s: {self._shortfall(bundles)}") from None
        return SlotGroup(name, bundles, strategy, pg)

    def _shortfall(self, bundles: Sequence[dict[str, float]]) -> str:
        nodes = [n["Resources"] for n in ray.nodes() if n["Alive"]]
        return shortfall(bundles, ray.cluster_resources(), ray.available_resources(), nodes)

    def release(self, group: SlotGroup) -> None:
        remove_placement_group(group.handle)

    def close(self) -> None:
        """Disconnect; a private instance stops, and so do this process's actors on a cluster."""
        try:
            ray.shutdown()
        finally:
            self._stop_head()

    def _stop_head(self) -> None:
        if self._head is not None:
            self._head.stop()


def _token_auth_as_ray_init() -> str:
    """Ray's token authentication for a private instance, as ray.init("local") sets it up: on
    unless RAY_AUTH_MODE says otherwise, with a token in ~/.ray/auth_token (made if missing); the
    mode, for the head. Ray has no public call for it (this process read RAY_AUTH_MODE when it
    imported Ray): these are the two calls ray.init makes (Ray 2.60)."""
    from ray._private.authentication import authentication_token_setup as auth

    auth.enable_token_auth_by_default()
    auth.ensure_token_if_auth_enabled(None, create_token_if_missing=True)
    return os.environ.get("RAY_AUTH_MODE", "disabled")


def _probe(address: str, timeout: float) -> None:
    """Wait until the cluster's address takes connections (ray.init would retry without end)."""
    if address == "auto":
        return  # Ray reads the address of the cluster started on this machine
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"Ray address {address!r}: expected 'local', 'auto', HOST:PORT or ray://HOST:PORT")
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection((host, int(port)), timeout=max(0.1, min(5.0, deadline - time.monotonic()))).close()
            return
        except OSError as e:
            if time.monotonic() > deadline:
                raise Stall(f"Ray cluster at {address}: no answer within {timeout:g} s ({e})") from None
            time.sleep(0.2)
