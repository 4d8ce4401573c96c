"""One suite, both runtimes: the local runtime and the Ray runtime on a private local instance
(started once for the module) must be the `Runtime` protocol and behave the same through it."""

from __future__ import annotations

import signal
import time

import pytest
import torch

from tempering.errors import UserError
from tempering.runtime import Blob, Event, LocalRuntime, Queue, Runtime, Stall, WorkerFailed, WorkerHandle

LONG = 120  # a deadline no passing test reaches: workers start in seconds even on a loaded machine


@pytest.fixture(scope="module", params=["local", "ray"])
def runtime(request, start_ray):
    if request.param == "local":
        yield LocalRuntime()
        return
    from tempering.runtime.ray import RayRuntime

    before = signal.getsignal(signal.SIGTERM)
    rt = start_ray(lambda: RayRuntime("local", num_cpus=2))
    assert signal.getsignal(signal.SIGTERM) is before  # the run's StopRequest, not Ray, decides on SIGTERM
    yield rt
    rt.close()


# -- worker targets (module level: both runtimes import them by name in the worker) ----------------------------
def _relay(inbox, outbox):
    """Doubles every number until None arrives, then passes None on."""
    while True:
        item = inbox.get(LONG, "relay's inbox")
        outbox.put(None if item is None else 2 * item, LONG, "relay's outbox")
        if item is None:
            return


def _crash():
    raise ValueError("rollout exploded")


def _bad_input():
    raise UserError("tasks.weights.chess: unknown domain")


def _wait_then_put(event, out):
    out.put("saw the event" if event.wait(LONG) else "gave up", LONG, "waiter")


def _set(event):
    event.set()


def _blob_sums(blob, out):
    state = blob.get(LONG, "blob reader")
    out.put({k: (v.dtype, v.shape, v.double().sum().item()) for k, v in state.items()}, LONG, "blob reader")


def _idle(seconds):
    time.sleep(seconds)


def _call_home(host, port, out):
    import socket

    with socket.create_connection((host, port), timeout=LONG) as conn:
        out.put(conn.recv(64).decode(), LONG, "caller")


def _report_signals(out):
    out.put([signal.getsignal(sig) is signal.SIG_IGN for sig in (signal.SIGINT, signal.SIGTERM)], LONG, "reporter")


# -- the protocol ---------------------------------------------------------------------------------------------
def test_the_runtime_and_what_it_makes_are_the_protocols(runtime):
    assert isinstance(runtime, Runtime) and isinstance(runtime.remote, bool) and isinstance(runtime.host, str)
    assert isinstance(runtime.queue(1, "typed"), Queue) and isinstance(runtime.event("typed"), Event)
    assert isinstance(runtime.put_blob({"w": torch.zeros(2)}), Blob)
    worker = runtime.spawn("typed", _idle, 0.0)
    try:
        assert isinstance(worker, WorkerHandle)
    finally:
        worker.join(LONG)


def test_the_protocol_checks_have_teeth():
    class NotARuntime:
        remote, host = False, "127.0.0.1"

        def queue(self, maxsize, name="queue"):
            return None

    assert not isinstance(NotARuntime(), Runtime)  # no event, spawn, has_room, put_blob, close
    assert not isinstance(object(), Event) and not isinstance(object(), WorkerHandle)


# -- queues --------------------------------------------------------------------------------------------------
def test_queue_keeps_order_and_its_bound(runtime):
    q = runtime.queue(3, "orders")
    for i in range(3):
        assert q.put(i, LONG, "trainer")
    assert not q.try_put(3)  # full: refused without waiting
    with pytest.raises(Stall, match="trainer: queue stayed full for 0.5 s"):
        q.put(3, 0.5, "trainer")
    assert [q.get(LONG, "trainer") for _ in range(3)] == [0, 1, 2]
    assert q.try_put("a") and q.try_put("b") and q.get(LONG, "trainer") == "a"
    q.drain()
    with pytest.raises(Stall):  # drained: "b" is gone
        q.get(0.3, "trainer")


def test_try_get_takes_what_is_there_and_waits_at_most_its_wait(runtime):
    q = runtime.queue(2, "orders")
    assert q.try_get() == (False, None)
    q.put("a", LONG, "trainer")
    q.put("b", LONG, "trainer")
    assert q.try_get(LONG, "worker") == (True, "a")  # a local put may take a moment to show
    assert q.try_get(LONG, "worker") == (True, "b")
    assert q.try_get(0.2, "worker") == (False, None)


def test_get_deadline_names_the_component(runtime):
    q = runtime.queue(1)
    start = time.monotonic()
    with pytest.raises(Stall, match="rollout worker: nothing arrived for 0.5 s"):
        q.get(0.5, "rollout worker")
    assert time.monotonic() - start >= 0.5  # at its deadline, not before


def test_a_set_stop_event_ends_waits(runtime):
    q, stop = runtime.queue(1), runtime.event("stop")
    assert q.put("x", LONG, "trainer")
    stop.set()
    assert q.put("y", LONG, "trainer", stop) is False
    assert q.get(LONG, "trainer", stop=stop) == "x"  # an item at hand is still taken
    assert q.get(LONG, "trainer", stop=stop) is None


# -- events and workers ---------------------------------------------------------------------------------------
def test_events_cross_workers(runtime):
    go, out = runtime.event("go"), runtime.queue(1)
    waiter = runtime.spawn("waiter", _wait_then_put, go, out)
    with pytest.raises(Stall):  # the waiter cannot put before the event is set
        out.get(0.5, "waiter", [waiter])
    assert not go.is_set()
    go.set()
    assert out.get(LONG, "waiter", [waiter]) == "saw the event"
    waiter.join(LONG)
    done = runtime.event("done")
    setter = runtime.spawn("setter", _set, done)
    assert done.wait(LONG) and done.is_set()
    setter.join(LONG)


def test_a_worker_consumes_one_queue_and_produces_to_another(runtime):
    inbox, outbox = runtime.queue(2, "inbox"), runtime.queue(2, "outbox")
    relay = runtime.spawn("relay", _relay, inbox, outbox)
    assert isinstance(relay.started(LONG), str) and relay.placed()
    results = []
    for item in [1, 2, 3, 4, 5, None]:  # more than both queues hold: taking results as they come
        inbox.put(item, LONG, "relay's inbox")
        if item is not None and item >= 2:
            results.append(outbox.get(LONG, "relay", [relay]))
    results += [outbox.get(LONG, "relay", [relay]) for _ in range(2)]
    assert results == [2, 4, 6, 8, 10, None]
    relay.join(LONG)
    assert not relay.alive()
    relay.check()  # it ended normally: nothing to report


def test_worker_exception_reaches_the_waiter_with_its_traceback(runtime):
    """A ValueError in a worker is a bug like any other (traceback); only a UserError is input
    to fix, told in one line."""
    for target, message, bad_input in ((_crash, "ValueError: rollout exploded", False),
                                       (_bad_input, "UserError: tasks.weights.chess", True)):
        worker = runtime.spawn("rollout", target)
        with pytest.raises(WorkerFailed, match=f"worker rollout: {message}") as e:
            runtime.queue(1).get(LONG, "rollout worker", [worker])
        assert e.value.bad_input == bad_input and e.value.worker == "rollout" and not e.value.died
        assert "Traceback" in e.value.traceback and target.__name__ in e.value.traceback
        worker.join(LONG)


def test_workers_ignore_sigint_and_sigterm(runtime):
    """A signal to a worker's process group must not end it: the trainer decides how a run ends."""
    out = runtime.queue(1)
    worker = runtime.spawn("reporter", _report_signals, out)
    assert out.get(LONG, "reporter", [worker]) == [True, True]
    worker.join(LONG)


def test_join_stops_a_stuck_worker(runtime):
    worker = runtime.spawn("idle", _idle, 3600)
    worker.started(LONG)
    assert worker.alive()
    worker.join(0.5)
    assert not worker.alive()


# -- blobs ---------------------------------------------------------------------------------------------------
def test_blob_round_trip_of_a_state_dict(runtime):
    torch.manual_seed(0)
    state = {"embed.weight": torch.randn(50, 8), "norm.weight": torch.ones(8, dtype=torch.bfloat16),
             "steps": torch.tensor(7), "mask": torch.tensor([True, False]), "empty": torch.zeros(0, 3),
             "head.weight": torch.randn(8, 50).t()}  # not contiguous
    expected = {k: v.clone() for k, v in state.items()}
    blob = runtime.put_blob(state)
    state["embed.weight"].add_(1.0)  # a blob is a snapshot: later changes do not show
    got = blob.get(LONG, "engine")
    assert got.keys() == expected.keys()
    for k, v in expected.items():
        assert got[k].dtype == v.dtype and got[k].shape == v.shape and torch.equal(got[k], v), k
    out = runtime.queue(1)
    reader = runtime.spawn("blob reader", _blob_sums, blob, out)  # and in another process
    sums = out.get(LONG, "blob reader", [reader])
    assert sums == {k: (v.dtype, v.shape, v.double().sum().item()) for k, v in expected.items()}
    reader.join(LONG)
    assert runtime.put_blob({"config": [1, 2]}).get(LONG, "engine") == {"config": [1, 2]}  # not tensors: as is


def test_a_worker_reaches_this_process_at_the_runtimes_host(runtime):
    """What a rendezvous (the trainer ranks') relies on: a server here, listening on every
    interface, answers a worker that connects to `runtime.host`."""
    import socket

    with socket.create_server(("", 0)) as server:
        out = runtime.queue(1)
        caller = runtime.spawn("caller", _call_home, runtime.host, server.getsockname()[1], out)
        server.settimeout(LONG)
        conn, _ = server.accept()
        with conn:
            conn.sendall(b"hello from " + runtime.host.encode())
        assert out.get(LONG, "caller", [caller]) == f"hello from {runtime.host}"
        caller.join(LONG)
