"""The reward service as a fault boundary: crashes, timeouts and junk never become a signal."""

import string
import threading

import pytest

from tempering.config import RewardConfig, SandboxConfig
from tempering.records import Budget, Task, Trajectory
from tempering.reward import RewardService, Submission, Verdict
from tempering.tasks import Domain, register
from tempering.sandbox.unisolated import UnisolatedSandbox
from tempering.tokenizer import char_tokenizer

TOKENIZER = char_tokenizer(string.printable + "\x00\ufffd")


def task(domain="sorting", answer="42"):
    """A task of `domain`, whose verifier checks it: sorting's exact answer, code's program output,
    or the test domains below."""
    return Task(id="t1", domain=domain, prompt="p", answer=answer, budget=Budget(time_limit_s=2))


def sample(text, finish="stop", ids=None):
    """A sample as the engine returns it: the text's tokens, then eos when the model stopped."""
    if ids is None:
        ids = TOKENIZER.encode(text) + ([TOKENIZER.eos_id] if finish == "stop" else [])
    return Trajectory(task_id="t1", domain="d", sample_index=0, prompt_ids=[5], token_ids=ids,
                      logprobs=[0.0] * len(ids), loss_mask=[1] * len(ids), versions=[0] * len(ids),
                      text=TOKENIZER.decode(ids), finish_reason=finish)


def service(cfg=RewardConfig(), sandbox=None):
    return RewardService(cfg, TOKENIZER, sandbox)


def score(svc, pairs):
    return svc.score([Submission(t, s) for t, s in pairs])


class Slow:
    """A verifier that blocks until released; `finished` tells whether it ever returned."""

    def __init__(self):
        self.release, self.finished = threading.Event(), threading.Event()

    def __call__(self, task, sample, context):
        self.release.wait(60)
        self.finished.set()
        return Verdict({"outcome": 1.0})


def _crash(task, sample, context):
    raise ZeroDivisionError("boom")


SLOW: list[Slow] = []  # the current test's slow verifier


def _slow(task, sample, context):
    return SLOW[-1](task, sample, context)


register([Domain("test/crash", "a verifier that raises", _crash, make=lambda rng: task("test/crash")),
          Domain("test/slow", "a verifier that blocks", _slow, make=lambda rng: task("test/slow"))], "test_reward")


@pytest.fixture
def slow():
    verifier = Slow()
    SLOW.append(verifier)
    yield verifier
    verifier.release.set()


def test_weights_components_and_reasons():
    svc = service(RewardConfig(weights={"outcome": 1.0, "partial": 0.5}))
    right, close, junk, empty = score(svc, [(task(), sample("42")), (task(), sample("43")),
                                           (task(), sample("\x00\ufffd<eos>")), (task(), sample("  "))])
    assert right.total == 1.5 and right.outcome == 1.0 and not right.failed
    assert close.components == {"outcome": 0.0, "partial": 0.5} and close.total == 0.25
    assert junk.total == 0 and not junk.failed
    assert junk.reason == "special token '<eos>' inside the answer"  # the text "<eos>" is the special token
    assert empty.reason == "empty answer" and not empty.failed
    svc.close()


def test_crash_and_timeout_are_marked_failures(slow):
    svc = service(RewardConfig(timeout_s=0.5, workers=2))
    crashed, late, fine = score(svc, [(task("test/crash"), sample("1")), (task("test/slow"), sample("1")), (task(), sample("42"))])
    assert not slow.finished.is_set()  # score gave up on the verifier at its deadline, not when it returned
    assert crashed.failed and "ZeroDivisionError: boom" in crashed.reason
    assert late.failed and "timed out" in late.reason
    assert fine.outcome == 1.0 and not fine.failed
    unknown, = score(svc, [(task("test/nosuch"), sample("1"))])
    assert unknown.failed and "unknown task domain 'test/nosuch'" in unknown.reason
    svc.close()


def test_pool_recovers_when_every_worker_is_stuck(slow):
    svc = service(RewardConfig(timeout_s=0.3, workers=1))
    first = score(svc, [(task("test/slow"), sample("1")), (task(), sample("42"))])
    assert not slow.finished.is_set()
    assert first[0].failed and first[1].failed and "exhausted" in first[1].reason
    again, = score(svc, [(task(), sample("42"))])
    assert again.outcome == 1.0
    svc.close()


def test_submit_returns_at_once_and_its_future_completes_when_the_verifiers_answer(slow):
    svc = service(RewardConfig(timeout_s=60.0, workers=2))
    future = svc.submit([Submission(task("test/slow"), sample("1")), Submission(task(), sample("42"))])
    assert not future.done()  # the slow verifier holds it; nothing waited for it
    slow.release.set()
    late, fine = future.result(timeout=60)
    assert slow.finished.is_set() and late.outcome == 1.0 and fine.outcome == 1.0
    svc.close()


def test_a_deadline_completes_the_future_of_a_verifier_that_never_returns(slow):
    svc = service(RewardConfig(timeout_s=0.3, workers=2))
    settled = threading.Event()
    future = svc.submit([Submission(task("test/slow"), sample("1"))])
    future.add_done_callback(lambda f: settled.set())
    assert settled.wait(60) and not slow.finished.is_set()
    (late,) = future.result()
    assert late.failed and "timed out after 0.3 s" in late.reason
    svc.close()


def test_program_output_runs_in_the_sandbox():
    svc = service(sandbox=UnisolatedSandbox())
    t = task("code", answer="14")
    ok, wrong, broken, loop = score(svc, [(t, sample("print(8+2+4)")), (t, sample("print(7)")), (t, sample("print(8+")),
                                         (t, sample("while True: pass"))])
    assert ok.components == {"outcome": 1.0, "partial": 1.0, "executes": 1.0}
    assert wrong.components == {"outcome": 0.0, "partial": 0.0, "executes": 1.0} and wrong.reason == "wrong output"
    close, = score(svc, [(t, sample("print(8+2+5)"))])  # prints 15 for 14: one digit of two agrees
    assert close.components == {"outcome": 0.0, "partial": 0.5, "executes": 1.0}
    assert broken.components["executes"] == 0.0 and "nonzero_exit" in broken.reason and not broken.failed
    assert loop.reason == "program timeout" and not loop.failed
    svc.close()


def test_program_output_runs_under_the_configured_limits():
    """A task whose budget sets no limits runs its program under the sandbox's `[sandbox]`
    limits, the output cap included (no cap of the verifier's own)."""
    free = Task(id="t1", domain="code", prompt="p", answer="x" * 5000, budget=Budget())
    svc = service(sandbox=UnisolatedSandbox(SandboxConfig()))
    long, = score(svc, [(free, sample("print('x' * 5000)"))])  # past the 4096 bytes it was once capped at
    assert long.components["outcome"] == 1.0, long
    svc.close()
    svc = service(sandbox=UnisolatedSandbox(SandboxConfig(time_limit_s=0.5, output_limit_bytes=100)))
    loud, slow = score(svc, [(free, sample("print('x' * 5000)")), (free, sample("import time; time.sleep(3)"))])
    assert loud.reason == "program output_limit" and not loud.failed, loud
    assert slow.reason == "program timeout" and not slow.failed, slow  # 0.5 s, not the 5 s default
    svc.close()


def test_program_output_without_sandbox_is_a_failure_not_a_zero():
    svc = service()
    r, = score(svc, [(task("code"), sample("print(1)"))])
    assert r.failed and "needs a sandbox" in r.reason
    svc.close()


def test_a_sampled_special_token_is_not_an_exact_answer():
    """`0 5 2 <pad>` decodes to `052`: only the ids show the model never gave that answer."""
    svc = service(RewardConfig(weights={"outcome": 1.0, "partial": 0.5}))
    digits = TOKENIZER.encode("052")
    padded = digits + [TOKENIZER.pad_id, TOKENIZER.eos_id]
    inside = digits[:1] + [TOKENIZER.inner.token_to_id("<bos>")] + digits[1:] + [TOKENIZER.eos_id]
    assert sample("", ids=padded).text == sample("", ids=inside).text == "052"  # what decoding hides
    t = task(answer="052")
    right, pad, bos, cut = score(svc, [(t, sample("052")), (t, sample("", ids=padded)), (t, sample("", ids=inside)),
                                      (t, sample("052", finish="length"))])
    assert right.outcome == 1.0 and right.reason == "correct"
    assert pad.outcome == 0.0 and pad.reason == "special token '<pad>' inside the answer" and not pad.failed
    assert bos.outcome == 0.0 and "'<bos>'" in bos.reason
    assert pad.components["partial"] == 3 / 8  # "052<pad>": the marker counts as wrong positions
    # cut off at max_tokens: the model never ended its answer, so it is not the answer
    assert cut.outcome == 0.0 and "did not end" in cut.reason
    svc.close()


def test_a_program_with_a_special_token_inside_is_not_run():
    """`print(1<eos>+2)` decodes to a program that would run; it is not what the model wrote."""
    svc = service(sandbox=UnisolatedSandbox())
    ids = TOKENIZER.encode("print(1") + [TOKENIZER.eos_id] + TOKENIZER.encode("+2)") + [TOKENIZER.eos_id]
    assert sample("", ids=ids).text == "print(1+2)"
    r, = score(svc, [(task("code", answer="3"), sample("", ids=ids))])
    assert r.outcome == 0.0 and r.components["executes"] == 0.0 and "'<eos>'" in r.reason
    svc.close()
