"""The embedded runtime: deadlines name the stalled component; worker failures surface."""

import time

import pytest

from tempering.runtime import LocalRuntime, Stall, WorkerFailed


def _crash():
    raise ValueError("rollout exploded")


def _idle(seconds):
    time.sleep(seconds)


def test_get_deadline_names_component():
    rt = LocalRuntime()
    q = rt.queue(1)
    start = time.monotonic()
    with pytest.raises(Stall, match="rollout worker: nothing arrived for 0.5 s"):
        q.get(0.5, "rollout worker")
    assert time.monotonic() - start < 3


def test_put_deadline_and_stop():
    rt = LocalRuntime()
    q = rt.queue(1)
    assert q.put("a", 1, "trainer")
    with pytest.raises(Stall, match="trainer: queue stayed full"):
        q.put("b", 0.5, "trainer")
    stop = rt.event()
    stop.set()
    assert q.put("b", 5, "trainer", stop) is False


def test_worker_exception_reaches_the_waiter_with_its_traceback():
    rt = LocalRuntime()
    worker = rt.spawn("rollout", _crash)
    q = rt.queue(1)
    with pytest.raises(WorkerFailed, match="worker rollout: ValueError: rollout exploded") as e:
        q.get(60, "rollout worker", [worker])
    assert e.value.bad_input and "Traceback" in e.value.traceback and "_crash" in e.value.traceback
    worker.join(5)


def test_join_terminates_a_stuck_worker():
    rt = LocalRuntime()
    worker = rt.spawn("idle", _idle, 60)
    start = time.monotonic()
    worker.join(timeout=0.5)
    assert not worker.process.is_alive() and time.monotonic() - start < 10
