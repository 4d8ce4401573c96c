"""What only the embedded runtime has: thread shares, stop requests, workers with processes of their
own. Queues, events, workers and blobs are in the suite both runtimes pass (tests/runtime/test_conformance.py)."""

import time

import pytest

from tempering.runtime import LocalRuntime


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


def test_the_embedded_runtime_never_imports_ray():
    """Ray is an extra (tempering[ray]): the default path must run where it is not installed."""
    import subprocess
    import sys

    code = "import sys, tempering.train, tempering.cli, tempering.runtime; print('ray' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "False\n"
