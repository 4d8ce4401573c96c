"""The junk audit over every reasoning domain (oracle 1.0, junk 0; bench/reasoning_audit.py runs
more seeds), and a fixed sample through the real RewardService: samples whose token ids spell
the reply, heavy verifiers in a spawned process, a hanging scorer killed at the deadline."""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
import random
import string
import time

import pytest

from tempering.config import RewardConfig
from tempering.records import Trajectory
from tempering.reward import RewardService, Submission
from tempering.tasks import get_domain
from tempering.tasks.reasoning import audit, catalog
from tempering.tasks.reasoning.domain import answer_block
from tempering.tokenizer import char_tokenizer

# light and heavy, built oracles, carried answers, math-verify, fixed and crashing scorers
SAMPLE = ("gcd", "coin_flip", "rush_hour", "graph_color", "boxnet", "game_of_life_halting", "prime_factorization",
          "n_queens", "ransom_note", "countdown", "polynomial_multiplication")


def test_every_domain_passes_the_junk_audit():
    report = audit.audit(seeds=(0, 1))
    assert report["failed"] == {} and len(report["passed"]) == report["datasets"] == 104
    assert set(report["fixed"]) == set(catalog.FIXED) and report["excluded"] == catalog.EXCLUDED
    assert report["checks"] >= 104 * 2 * 10


def test_the_audit_reports_a_scorer_that_pays_junk(monkeypatch):
    monkeypatch.setitem(catalog.FIXED, "game_of_life_halting", catalog.Fix(why="test", does="nothing"))
    result = audit.audit_dataset("game_of_life_halting", seeds=(0,))
    assert not result.passed and any("junk 'zero': 1.0" in f for f in result.failures)  # bool('0') is True


def test_the_bench_prints_the_report(capsys):
    assert audit.main(["gcd", "--seeds", "1"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["passed"] == ["gcd"] and report["failed"] == {} and "seconds" in report
    assert report["excluded"]["propositional_logic"] and report["fixed"]["gcd"]["why"]


def sample(tok, text: str, finish: str = "stop") -> Trajectory:
    ids = tok.encode(text) + ([tok.eos_id] if finish == "stop" else [])
    return Trajectory(task_id="t", domain="d", sample_index=0, prompt_ids=[1], token_ids=ids, logprobs=[0.0] * len(ids),
                      loss_mask=[1] * len(ids), versions=[0] * len(ids), text=tok.decode(ids), finish_reason=finish)


@pytest.fixture(scope="module")
def tasks():
    return [get_domain(f"reasoning/{d}").make(random.Random(i)) for i, d in enumerate(SAMPLE)]


def test_a_sample_of_domains_through_the_reward_service(tasks):
    replies = {"oracle": None, "empty": "", "zero": "0", "text": "the quick brown fox",
               "numbers": ", ".join(map(str, range(300))), "empty_tags": "<answer></answer>"}
    texts = [t.reference for t in tasks] + [t.prompt for t in tasks]
    tok = char_tokenizer(string.printable + "".join(texts))
    svc = RewardService(RewardConfig(timeout_s=60, workers=2), tok)
    try:
        items, want = [], []
        for t in tasks:
            for name, reply in replies.items():
                text = t.reference if reply is None else reply if name == "empty_tags" else answer_block(reply)
                if name != "oracle" and text == t.reference:
                    continue
                items.append(Submission(t, sample(tok, f"Let me think.\n{text}")))
                want.append((t.domain, name, 1.0 if reply is None else 0.0))
            items.append(Submission(t, sample(tok, t.prompt)))  # the question copied back
            want.append((t.domain, "question", 0.0))
            items.append(Submission(t, sample(tok, t.reference, finish="length")))  # cut off: not an answer
            want.append((t.domain, "cut off", 0.0))
        rewards = svc.score(items)
    finally:
        svc.close()
    got = [(d, name, r.outcome) for (d, name, _), r in zip(want, rewards)]
    assert got == want, [(w, r.reason) for w, r in zip(want, rewards) if (w[0], w[1], r.outcome) != w]
    assert not any(r.failed for r in rewards)
    assert {r.components.get("format") for r, w in zip(rewards, want) if w[1] == "oracle"} == {1.0}


def test_a_hanging_scorer_is_killed_at_the_deadline_and_marked_failed():
    """intermediate_integration's scorer simplifies the reply's derivative with sympy: a valid
    but big expression runs for minutes. Its domain is heavy: the reward service runs it in a
    process that it kills at reward.timeout_s; the failed reward is never trained on."""
    domain = get_domain("reasoning/intermediate_integration")
    assert domain.heavy
    t = domain.make(random.Random(0))
    slow = answer_block("(x**2 + x + 1)**25*sin(x)**25*exp(x)**25*cos(x)**25 + C")
    tok = char_tokenizer(string.printable + t.reference)
    svc = RewardService(RewardConfig(timeout_s=60, workers=1), tok)
    try:
        # the oracle, verified in the spawned process (which starts, imports and rebuilds the entry)
        warm, = svc.score([Submission(t, sample(tok, t.reference))])
        assert warm.outcome == 1.0 and not warm.failed, warm.reason
        workers = {p.pid for p in multiprocessing.active_children()}
        assert workers
        svc.cfg = dataclasses.replace(svc.cfg, timeout_s=3.0)  # the deadline, now that the process is up
        start = time.perf_counter()
        hung, = svc.score([Submission(t, sample(tok, slow))])
        assert hung.failed and "timed out" in hung.reason and time.perf_counter() - start < 15, hung.reason
        deadline = time.monotonic() + 10
        while any(_running(pid) for pid in workers) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(_running(pid) for pid in workers)  # killed, not left computing
    finally:
        svc.close()


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False
