"""The reward service as a fault boundary: crashes, timeouts and junk never become a signal."""

import time

import pytest

from tempering.config import RewardConfig
from tempering.records import Budget, Task
from tempering.reward import VERIFIERS, RewardService, Verdict
from tempering.sandbox.unisolated import UnisolatedSandbox


def task(verifier="exact_answer", answer="42"):
    return Task(id="t1", domain="d", prompt="p", verifier=verifier, answer=answer, budget=Budget(time_limit_s=2))


@pytest.fixture
def extra_verifiers():
    def crash(task, completion, sandbox):
        raise ZeroDivisionError("boom")

    def slow(task, completion, sandbox):
        time.sleep(5)
        return Verdict({"outcome": 1.0})

    VERIFIERS.update(crash=crash, slow=slow)
    yield
    del VERIFIERS["crash"], VERIFIERS["slow"]


def test_weights_components_and_reasons():
    svc = RewardService(RewardConfig(weights={"outcome": 1.0, "partial": 0.5}))
    right, close, junk, empty = svc.score([(task(), "42"), (task(), "43"), (task(), "\x00\ufffd<eos>"), (task(), "  ")])
    assert right.total == 1.5 and right.outcome == 1.0 and not right.failed
    assert close.components == {"outcome": 0.0, "partial": 0.5} and close.total == 0.25
    assert junk.total == 0 and junk.reason == "wrong answer" and not junk.failed
    assert empty.reason == "empty answer" and not empty.failed
    svc.close()


def test_crash_and_timeout_are_marked_failures(extra_verifiers):
    svc = RewardService(RewardConfig(timeout_s=0.5, workers=2))
    start = time.monotonic()
    crashed, slow, fine = svc.score([(task("crash"), "1"), (task("slow"), "1"), (task(), "42")])
    assert time.monotonic() - start < 3
    assert crashed.failed and "ZeroDivisionError: boom" in crashed.reason
    assert slow.failed and "timed out" in slow.reason
    assert fine.outcome == 1.0 and not fine.failed
    unknown, = svc.score([(task("nosuch"), "1")])
    assert unknown.failed and "unknown verifier 'nosuch'" in unknown.reason
    svc.close()


def test_pool_recovers_when_every_worker_is_stuck(extra_verifiers):
    svc = RewardService(RewardConfig(timeout_s=0.3, workers=1))
    first = svc.score([(task("slow"), "1"), (task(), "42")])
    assert first[0].failed and first[1].failed and "exhausted" in first[1].reason
    again, = svc.score([(task(), "42")])
    assert again.outcome == 1.0
    svc.close()


def test_program_output_runs_in_the_sandbox():
    svc = RewardService(RewardConfig(), UnisolatedSandbox())
    t = task("program_output", answer="14")
    ok, wrong, broken, loop = svc.score([(t, "print(8+2+4)"), (t, "print(7)"), (t, "print(8+"),
                                         (t, "while True: pass")])
    assert ok.components == {"outcome": 1.0, "partial": 1.0, "executes": 1.0}
    assert wrong.components == {"outcome": 0.0, "partial": 0.0, "executes": 1.0} and wrong.reason == "wrong output"
    close, = svc.score([(t, "print(8+2+5)")])  # prints 15 for 14: one digit of two agrees
    assert close.components == {"outcome": 0.0, "partial": 0.5, "executes": 1.0}
    assert broken.components["executes"] == 0.0 and "nonzero_exit" in broken.reason and not broken.failed
    assert loop.reason == "program timeout" and not loop.failed
    svc.close()


def test_program_output_without_sandbox_is_a_failure_not_a_zero():
    svc = RewardService(RewardConfig())
    r, = svc.score([(task("program_output"), "print(1)")])
    assert r.failed and "needs a sandbox" in r.reason
    svc.close()
