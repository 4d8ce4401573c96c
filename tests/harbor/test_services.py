"""A server the task's own oracle starts in the background serves its tests: the trial runs them
in one job (`services`) once the oracle's command left it running; a solution from elsewhere
that does the same gets no such job, and scores 0. Judged by the reward read on the host."""

from __future__ import annotations

from harbor_helpers import make_task, needs_sandbox
from tempering.sandbox.workspace import Workspace
from tempering.tasks import harbor

pytestmark = needs_sandbox

SERVE = """#!/bin/bash
mkdir -p site && echo 42 > site/answer.txt
setsid python3 -m http.server 8123 --bind 127.0.0.1 --directory site >/dev/null 2>&1 &
for _ in $(seq 100); do
  python3 -c 'import socket; socket.create_connection(("127.0.0.1", 8123))' 2>/dev/null && break; sleep 0.05
done
"""
ASKS_THE_SERVER = """import urllib.request

def test_the_server_answers():
    assert urllib.request.urlopen("http://127.0.0.1:8123/answer.txt", timeout=5).read() == b"42\\n"
"""


def test_the_oracles_server_lives_through_its_tests(sandbox, tmp_path):
    task = harbor.load(make_task(tmp_path, solve=SERVE, tests=ASKS_THE_SERVER))
    oracle = harbor.run_trial(sandbox, task)
    assert oracle.services and oracle.reward == 1.0, (oracle.reason, oracle.verdict.output)
    assert oracle.solution_reason == "ok" and "served the tests" in oracle.reason
    noop = harbor.run_trial(sandbox, task, harbor.NOOP)
    assert not noop.services and noop.reward == 0.0
    other = harbor.run_trial(sandbox, task, Workspace.from_files({"solve.sh": SERVE.encode()}))
    assert not other.services and other.reward == 0.0, other.reason


def test_the_importer_says_when_the_oracle_needed_its_services(sandbox, tmp_path):
    make_task(tmp_path, solve=SERVE, tests=ASKS_THE_SERVER)
    (result,) = harbor.scan([tmp_path], sandbox.toolchain, sandbox, oracle=True, noop=True)
    assert result.runnable and (result.oracle, result.noop) == (1.0, 0.0), result.reason
    assert "processes served its tests in one job" in result.reason
