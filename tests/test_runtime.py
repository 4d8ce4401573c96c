"""The embedded runtime: deadlines name the stalled component; worker failures surface."""

import time

import pytest

from tempering.errors import UserError
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
    assert time.monotonic() - start >= 0.5  # it raised at its deadline, not before


def test_put_deadline_and_stop():
    rt = LocalRuntime()
    q = rt.queue(1)
    assert q.put("a", 1, "trainer")
    with pytest.raises(Stall, match="trainer: queue stayed full"):
        q.put("b", 0.5, "trainer")
    stop = rt.event()
    stop.set()
    assert q.put("b", 5, "trainer", stop) is False


def _bad_input():
    raise UserError("tasks.weights.chess: unknown domain")


def test_worker_exception_reaches_the_waiter_with_its_traceback():
    """A ValueError in a worker is a bug like any other (traceback); only a UserError is input
    to fix, told in one line."""
    rt = LocalRuntime()
    for target, name, bad_input in ((_crash, "ValueError: rollout exploded", False),
                                    (_bad_input, "UserError: tasks.weights.chess", True)):
        worker = rt.spawn("rollout", target)
        q = rt.queue(1)
        with pytest.raises(WorkerFailed, match=f"worker rollout: {name}") as e:
            q.get(60, "rollout worker", [worker])
        assert e.value.bad_input == bad_input
        assert "Traceback" in e.value.traceback and target.__name__ in e.value.traceback
        worker.join(5)


def test_join_terminates_a_stuck_worker():
    rt = LocalRuntime()
    worker = rt.spawn("idle", _idle, 60)
    start = time.monotonic()
    worker.join(timeout=0.5)
    assert not worker.process.is_alive() and time.monotonic() - start < 10


def test_threads_auto_splits_the_cores_and_oversubscription_warns(monkeypatch, capsys):
    from tempering.runtime import threads_per_process

    monkeypatch.setattr("os.sched_getaffinity", lambda pid: set(range(8)))
    assert threads_per_process("auto", 2) == 4 and threads_per_process("auto", 3) == 2
    assert threads_per_process(3, 2) == 3 and capsys.readouterr().err == ""
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0})
    assert threads_per_process("auto", 2) == 1  # never zero
    assert threads_per_process(2, 2) == 2
    assert "asks for 4 threads on 1 cores" in capsys.readouterr().err


def test_stop_request_on_signal_and_time_budget():
    import os
    import signal

    from tempering.runtime import StopRequest

    with StopRequest() as stop:
        assert not stop.is_set()
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.is_set() and stop.reason == "SIGTERM"
        with pytest.raises(KeyboardInterrupt):  # a second signal stops at once
            os.kill(os.getpid(), signal.SIGINT)
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # handlers restored
    budget = StopRequest(max_seconds=5, started=time.monotonic() - 6)
    assert budget.is_set() and budget.reason == "run.max_seconds"
    assert not StopRequest(max_seconds=60).is_set()


def _pool_in_worker(out):
    import multiprocessing as mp

    import pebble

    with pebble.ProcessPool(1, context=mp.get_context("spawn")) as pool:
        out.put(pool.schedule(abs, args=(-3,)).result(timeout=60), 60, "test")


def test_a_worker_may_start_processes_of_its_own():
    """The rollout worker runs heavy verifiers in a process pool: a daemonic worker could not."""
    rt = LocalRuntime()
    q = rt.queue(1)
    worker = rt.spawn("rollout", _pool_in_worker, q)
    assert q.get(120, "rollout worker", [worker]) == 3
    worker.join(30)
