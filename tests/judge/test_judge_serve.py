"""The judge client against a real `tempering serve` (a subprocess on a free port) serving a tiny
grader trained in a few seconds to answer every chat prompt with "SCORE: 7": many items in flight
together, the cache, and the failures a real server gives (a prompt past the context, a reply cut
before its SCORE line)."""

from __future__ import annotations

import json
import queue
import re
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from grader_model import CONTEXT, REPLY, train_grader

from tempering.config import JudgeConfig
from tempering.reward.judge import Judge, JudgeError
from tempering.verdict import InfrastructureError, JudgeItem

ROOT = Path(__file__).resolve().parents[2]
RUBRIC = "Is the answer correct? Grade strictly."
START_DEADLINE_S = 60.0


@pytest.fixture(scope="module")
def base_url(tmp_path_factory):
    """The base URL of a `tempering serve` of the grader; the server is killed at the end."""
    folder = train_grader(tmp_path_factory.mktemp("grader"))
    log = open(folder / "serve.log", "w+")
    # --port 0: the server binds a free port itself and prints it, so no other process can take it first.
    proc = subprocess.Popen([sys.executable, "-m", "tempering.cli", "serve", str(folder), "--port", "0",
                             "--name", "grader", "--threads", "1", f"--engine.max_seq_len={CONTEXT}",
                             "--engine.max_batch_size=8", "--serve.request_timeout_s=60"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=log, text=True)
    lines: queue.Queue = queue.Queue()
    reader = threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout], daemon=True)
    reader.start()
    try:
        yield _wait_ready(proc, lines, log)
    finally:
        proc.kill()
        proc.wait(10)
        reader.join(5)
        proc.stdout.close()
        log.close()


def _wait_ready(proc: subprocess.Popen, lines: queue.Queue, log) -> str:
    deadline = time.monotonic() + START_DEADLINE_S

    def failed(why: str):
        log.seek(0)
        pytest.fail(f"tempering serve {why}:\n{log.read()[-3000:]}")

    base_url = None
    while base_url is None:
        if proc.poll() is not None:
            failed(f"exited with status {proc.returncode}")
        if time.monotonic() > deadline:
            failed(f"printed no address within {START_DEADLINE_S:g} s")
        try:
            m = re.search(r"on (http://[\d.]+:\d+/v1)", lines.get(timeout=0.2))
        except queue.Empty:
            continue
        base_url = m.group(1) if m else None
    while True:
        try:
            with urllib.request.urlopen(base_url.removesuffix("/v1") + "/health", timeout=2) as r:
                if r.status == 200 and json.loads(r.read()) == {"status": "ok"}:
                    return base_url
        except OSError:
            pass
        if proc.poll() is not None:
            failed(f"exited with status {proc.returncode}")
        if time.monotonic() > deadline:
            failed(f"not healthy within {START_DEADLINE_S:g} s")
        time.sleep(0.1)


def spec(base_url: str, **kw) -> JudgeConfig:
    return JudgeConfig(**{"base_url": base_url, "model": "grader", "rubric": RUBRIC, "temperature": 0.0,
                          "max_tokens": 12, "timeout_s": 60.0, "retries": 1, "backoff_s": 0.05, **kw})


ITEMS = [JudgeItem(f"What is {i} + {i}?", answer=str(2 * i), reference=str(2 * i) if i % 3 == 0 else None)
         for i in range(12)]


def test_many_items_in_flight_are_graded_and_a_repeat_is_served_from_the_cache(base_url):
    with Judge(spec(base_url, max_in_flight=4)) as judge:
        results = judge.judge(ITEMS)
        assert [(r.ok, r.score, r.reply) for r in results] == [(True, pytest.approx(0.7), REPLY)] * 12, \
            [r.error or r.reply for r in results]
        assert all(r.attempts == 1 and not r.cached for r in results)
        stats = judge.stats()
        assert stats["requests"] == 12 and stats["judged"] == 12 and stats["cache_misses"] == 12
        assert stats["cache_hits"] == 0 and stats["errors"] == 0 and stats["retries"] == 0

        again = judge.judge(ITEMS)
        assert [(r.score, r.reply, r.cached, r.attempts) for r in again] == [(pytest.approx(0.7), REPLY, True, 0)] * 12
        stats = judge.stats()
        assert stats["requests"] == 12 and stats["cache_hits"] == 12 and stats["cache_misses"] == 12


def test_a_prompt_past_the_context_is_a_refused_request_not_a_score(base_url):
    # criteria of ~2200 characters: a prompt of ~3000 tokens, past the server's 2048
    long_rubric = RUBRIC + " " + "Check every step of the working carefully. " * 50
    item = JudgeItem("What is 1 + 1?", answer="2")
    with Judge(spec(base_url, rubric=long_rubric)) as judge:
        [result] = judge.judge([item])
        with pytest.raises(InfrastructureError):  # never a training signal
            judge.score(item)  # failures are not cached: a second request, refused again
        stats = judge.stats()
    assert not result.ok and result.score is None and result.reply == ""
    error = result.error
    assert isinstance(error, JudgeError) and isinstance(error, InfrastructureError)
    assert error.kind == "http" and error.status == 400 and error.attempts == 1  # a 4xx is not retried
    assert f"exceeds engine.max_seq_len {CONTEXT}" in str(error)
    assert stats["requests"] == 2 and stats["retries"] == 0 and stats["errors/http"] == 2 and stats["judged"] == 0
    with Judge(spec(base_url)) as judge:
        assert judge.score(ITEMS[0]) == pytest.approx(0.7)  # the refusal left the server serving


def test_a_reply_cut_before_its_score_line_is_a_parse_error(base_url):
    with Judge(spec(base_url, max_tokens=3)) as judge:
        [result] = judge.judge([ITEMS[1]])
        stats = judge.stats()
    assert not result.ok and result.score is None
    error = result.error
    assert isinstance(error, JudgeError) and isinstance(error, InfrastructureError)
    assert error.kind == "parse" and "no SCORE line" in str(error) and error.attempts == 1
    assert result.reply == error.reply == REPLY[:3]  # what the model wrote before max_tokens cut it
    assert stats["requests"] == 1 and stats["errors/parse"] == 1 and stats["retries"] == 0
