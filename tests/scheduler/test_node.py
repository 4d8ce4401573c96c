"""`NodeSandbox` over a real isolated (bwrap) sandbox: the order in which waiting runs reach the
backend (recorded by a wrapper around it, so the order is the node's and not a thread race),
session commands queueing as node jobs, per-task sandbox seconds, and runs that end while
waiting for a slot (abort, `wait_s`) without ever reaching the backend. Order and counts
only: no threshold on speed."""

from __future__ import annotations

import shutil
import threading
import time

import pytest

from tempering.config import SandboxConfig
from tempering.records import ExecReason
from tempering.sandbox import ExecRequest, ExecTag, SessionSpec, make_sandbox
from tempering.sandbox.request import Abort
from tempering.scheduler.node import NodeSandbox

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None,
                                reason="bubblewrap is not installed (apt-get install -y bubblewrap)")
TIMEOUT_S = 120.0  # guards against a hang only


@pytest.fixture(scope="module")
def backend(tmp_path_factory):
    sb = make_sandbox(SandboxConfig(workers=2, disk_mb=16), log_dir=tmp_path_factory.mktemp("run"))
    yield sb
    sb.close()


class Recording:
    """The backend, noting each request's tag as the node hands it over (its start order)."""

    def __init__(self, backend):
        self.backend, self.name = backend, backend.name
        self.tags: list[ExecTag] = []
        self._lock = threading.Lock()

    def run(self, request, abort=None):
        with self._lock:
            self.tags.append(request.tag)
        return self.backend.run(request, abort)

    def open_session(self, spec, runner=None):
        return self.backend.open_session(spec, runner)

    def close(self):
        pass  # the module's backend outlives each node


def make_node(backend, slots: int, **kw) -> NodeSandbox:
    return NodeSandbox(Recording(backend), slots, slots * 256, 256, **kw)


def samples(node) -> list[str]:
    return [t.sample for t in node.backend.tags]


def wait_until(predicate) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def queued(node) -> int:
    return node.report().queued  # (resets the waits reported so far)


def in_thread(fn) -> tuple[threading.Thread, list]:
    out: list = []
    th = threading.Thread(target=lambda: out.append(fn()), daemon=True)
    th.start()
    return th, out


def join(th: threading.Thread) -> None:
    th.join(TIMEOUT_S)
    assert not th.is_alive(), "a run never returned"


class Hold:
    """Occupies one of the node's slots with `sleep 60` until `release`."""

    def __init__(self, node):
        self.node, self.abort = node, Abort()
        req = ExecRequest(("sleep", "60"), time_limit_s=120, tag=ExecTag(sample="hold/0", domain="hold"))
        self.thread, self.out = in_thread(lambda: node.run(req, self.abort))
        wait_until(lambda: "hold/0" in samples(node) and node.report().running == 1)

    def release(self):
        self.abort.fire()
        join(self.thread)
        self.abort.close()
        assert self.out[0].reason == ExecReason.KILLED, self.out


def queue_from_threads(node, requests, abort=None) -> list[tuple[threading.Thread, list]]:
    """Start each request's run in a thread of its own, one after another in queue order."""
    runs = []
    for req in requests:
        n = queued(node)
        runs.append(in_thread(lambda r=req: node.run(r, abort)))
        wait_until(lambda: queued(node) == n + 1)
    return runs


def test_waiting_runs_start_in_priority_order(backend):
    """One slot held: queued runs reach the backend by domain priority (+1 for evaluations), then arrival."""
    node = make_node(backend, 1, aging_s=10_000.0)  # arrival gaps (thread starts) never outweigh a level
    node.set_policy({}, {"low": 0, "mid": 1, "high": 2})
    hold = Hold(node)
    jobs = [("low-1", "low", ""), ("high-1", "high", ""), ("low-eval", "low", "final"), ("mid-1", "mid", ""),
            ("high-eval", "high", "step-000010"), ("low-2", "low", ""), ("other", "unknown", "")]
    requests = [ExecRequest(("true",), tag=ExecTag(sample=f"{n}/0", domain=d, eval=e)) for n, d, e in jobs]
    runs = queue_from_threads(node, requests)
    assert samples(node) == ["hold/0"]  # nothing passed the held slot
    hold.release()
    for th, out in runs:
        join(th)
        assert out[0].ok, out
    # priorities: high-eval 3, high-1 2, low-eval 1, mid-1 1, low-1 0, low-2 0, other 0 (unknown domain)
    assert samples(node)[1:] == [f"{n}/0" for n in
                                 ["high-eval", "high-1", "low-eval", "mid-1", "low-1", "low-2", "other"]]


def test_served_runs_wait_by_their_tenant_not_their_domain(backend):
    """Serving: jobs of agent runs queue under their tenant (its priority; its share is the local
    scheduler's quota, tested there), whatever the task's domain."""
    node = make_node(backend, 1, aging_s=10_000.0)
    node.set_policy({}, {"vip": 1, "terminal": 5})
    hold = Hold(node)
    jobs = [("heavy-1", "heavy"), ("heavy-2", "heavy"), ("light-1", "light"), ("vip-1", "vip")]
    requests = [ExecRequest(("sleep", "0.2"), tag=ExecTag(sample=f"{n}/0", domain="terminal", tenant=t))
                for n, t in jobs]
    runs = queue_from_threads(node, requests)
    assert node.report().queued_by_domain == {"heavy": 2, "light": 1, "vip": 1}  # queued by tenant
    hold.release()
    for th, out in runs:
        join(th)
        assert out[0].ok, out
    # vip first (a level up; the domain's own level does not count), then in order of arrival
    assert samples(node)[1:] == ["vip-1/0", "heavy-1/0", "heavy-2/0", "light-1/0"]


def test_session_commands_queue_as_node_jobs(backend):
    """A session opened through the node runs each command as a node job: it waits for the slot and is counted."""
    node = make_node(backend, 1)
    with node.open_session(SessionSpec(tag=ExecTag(domain="code"))) as s:
        hold = Hold(node)
        node.report()  # forget the hold's wait
        th, out = in_thread(lambda: s.run(("bash", "-c", "echo 0 >> log")))
        wait_until(lambda: queued(node) == 1)
        assert node.report().queued_by_domain == {"code": 1} and samples(node) == ["hold/0"]
        hold.release()
        join(th)
        assert out[0].ok, out
        for i in (1, 2):
            assert s.run(("bash", "-c", f"echo {i} >> log")).ok
        assert s.read_file("log") == b"0\n1\n2\n"
    r = node.report()
    assert len(r.waits["code"]) == 3 and set(r.waits) == {"code"} and (r.running, r.queued) == (0, 0)
    assert [t.domain for t in node.backend.tags] == ["hold", "code", "code", "code"]
    assert all(t.turn == -1 and t.sample == "" for t in node.backend.tags[1:])


def test_take_seconds_sums_the_wall_seconds_of_a_tasks_samples(backend):
    """take_seconds(task) is the sum of its samples' wall_s (task ids may hold '/'), then forgotten."""
    node = make_node(backend, 2)
    tags = ["t1/0", "t2/0", "t1/1", "suite/t3/0", "t1/2", ""]
    results = {}
    for sample in tags:
        results[sample] = node.run(ExecRequest(("sleep", "0.1"), tag=ExecTag(sample=sample, domain="d")))
        assert results[sample].ok and results[sample].wall_s > 0, results[sample]
    t1 = sum(results[f"t1/{i}"].wall_s for i in range(3))
    assert node.take_seconds("t1") == pytest.approx(t1)
    assert node.take_seconds("t1") == 0.0
    assert node.take_seconds("t2") == pytest.approx(results["t2/0"].wall_s)
    assert node.take_seconds("suite/t3") == pytest.approx(results["suite/t3/0"].wall_s)
    assert node.take_seconds("suite") == 0.0 and node.take_seconds("") == 0.0


def test_abort_while_waiting_for_a_slot_ends_as_killed_without_running(backend):
    """An aborted waiting run returns KILLED, leaves the queue, never reaches the backend; the node goes on."""
    node = make_node(backend, 1)
    hold = Hold(node)
    abort = Abort()
    [(th, out)] = queue_from_threads(node, [ExecRequest(("true",), tag=ExecTag(sample="never/0", domain="x"))],
                                     abort)
    abort.fire()
    join(th)
    abort.close()
    assert out[0].reason == ExecReason.KILLED and "waiting for a sandbox slot" in out[0].error, out
    assert queued(node) == 0 and samples(node) == ["hold/0"]
    hold.release()
    assert node.run(ExecRequest(("true",), tag=ExecTag(sample="after/0", domain="x"))).ok
    assert samples(node) == ["hold/0", "after/0"] and node.take_seconds("never") == 0.0


def test_a_run_waiting_longer_than_wait_s_is_a_sandbox_error(backend):
    """Past wait_s the run gives up as SANDBOX_ERROR naming the node's slots, without running."""
    node = make_node(backend, 1, wait_s=0.5)
    hold = Hold(node)
    r = node.run(ExecRequest(("true",), tag=ExecTag(sample="late/0", domain="x")))
    assert r.reason == ExecReason.SANDBOX_ERROR and r.exit_code is None, r
    assert "waited 0.5 s for one of the node's 1 sandbox slots" in r.error
    assert queued(node) == 0 and samples(node) == ["hold/0"]
    hold.release()
    assert (node.report().running, node.local.memory_used) == (0, 0)


def test_an_abort_tells_its_listeners_once_and_forgets_those_that_left():
    abort, told = Abort(), []
    abort.when_fired(lambda: told.append("waiting"))
    forget = abort.when_fired(lambda: told.append("left"))
    forget()
    abort.fire()
    abort.fire()
    abort.when_fired(lambda: told.append("after"))  # already fired: told at once
    assert told == ["waiting", "after"]
    abort.close()
