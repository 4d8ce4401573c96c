"""A scripted policy working a terminal task through the agent loop: it runs the failing test,
reads the code, edits it and submits; the task's hidden tests, run on its final workspace in a
fresh sandbox, give the reward. Doing nothing, or planting a conftest.py that passes every
test, gets nothing."""

from __future__ import annotations

import dataclasses
import string
from pathlib import Path

import pytest
from harbor_helpers import needs_sandbox

from tempering.agent.format import tool_format
from tempering.config import RewardConfig
from tempering.records import Budget, Environment, Task
from tempering.reward import RewardService, Submission
from tempering.rollout import Episode
from tempering.rollout.environment import Environments
from tempering.rollout.group_key import GroupKey
from tempering.rollout.episode import replay
from tempering.tokenizer import char_tokenizer

TOK = char_tokenizer(string.printable)

CALC = "def add(a, b):\n    return a - b\n"
VISIBLE_TEST = "from calc import add\n\ndef test_add():\n    assert add(2, 3) == 5\n"
HIDDEN_TESTS = "from calc import add\n\ndef test_add():\n    assert add(2, 3) == 5\n    assert add(-1, 1) == 0\n"
TEST_SH = """#!/bin/bash
cd /tests
pytest -q -p no:cacheprovider test_outputs.py
if [ $? -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
"""


def write_task(root: Path) -> Path:
    task = root / "fix-add"
    (task / "environment").mkdir(parents=True)
    (task / "tests").mkdir()
    (task / "instruction.md").write_text("test_calc.py fails: fix add in /app/calc.py.\n")
    (task / "task.toml").write_text('version = "1.0"\n[verifier]\ntimeout_sec = 60.0\n[agent]\ntimeout_sec = 120.0\n')
    (task / "environment" / "Dockerfile").write_text("FROM python:3.11-slim\nWORKDIR /app\nCOPY . /app/\n")
    (task / "environment" / "calc.py").write_text(CALC)
    (task / "environment" / "test_calc.py").write_text(VISIBLE_TEST)
    (task / "tests" / "test.sh").write_text(TEST_SH)
    (task / "tests" / "test_outputs.py").write_text(HIDDEN_TESTS)
    (task / "tests" / "conftest.py").write_text("import sys\nsys.path.insert(0, '/app')\n")
    return task


def play(sandbox, folder: Path, turns: list[str]):
    task = Task(id="fix-add", domain="terminal", prompt="test_calc.py fails: fix add in /app/calc.py.\n",
                answer="", tools=("run", "read", "write", "edit", "submit"),
                environment=Environment(workdir="/app", folder=str(folder)), budget=Budget(max_turns=8, max_tokens=4000))
    (host,) = Environments(sandbox).open(task, 1, GroupKey.train(3, 0))
    fmt = tool_format("compact", TOK)
    try:
        ep = replay(Episode(task, 0, TOK.encode_prompt(task.prompt), 4000, 1 << 20, fmt.parse, fmt.renderer, host),
                    turns, TOK)
        trajectory = ep.trajectory("")
        reward = RewardService(RewardConfig(), TOK, sandbox)
        try:
            (r,) = reward.score([Submission(task, trajectory, host.workspace)])
        finally:
            reward.close()
        return trajectory, r, host.workspace
    finally:
        host.close()


def observation(t, i):
    tools = [x for x in t.turns if x.role == "tool"]
    return TOK.decode(t.token_ids[tools[i].start: tools[i].end])


@needs_sandbox
def test_a_scripted_agent_fixes_the_bug_and_the_hidden_tests_pass(sandbox, tmp_path):
    folder = write_task(tmp_path)
    t, reward, workspace = play(sandbox, folder, [
        "$run python3 -m pytest -q -p no:cacheprovider test_calc.py",
        "$read calc.py",
        "$edit calc.py\n    return a - b\n    return a + b",
        "$run python3 -m pytest -q -p no:cacheprovider test_calc.py",
        "$submit",
    ])
    assert "1 failed" in observation(t, 0) and "assert -1 == 5" in observation(t, 0)  # it read the failure
    assert observation(t, 1) == f">{CALC}\n"
    assert "1 passed" in observation(t, 3)
    assert t.finish_reason == "stop" and [c.name for c in t.tool_calls] == ["run", "read", "edit", "run", "submit"]
    assert workspace.read("calc.py") == b"def add(a, b):\n    return a + b\n"
    assert reward.outcome == 1.0 and not reward.failed, reward.reason
    # the commands' sandbox time is in the process components
    assert 0 < reward.components["sandbox_time"] < 1 and reward.components["valid_calls"] == 1.0
    runs = [c.result for c in t.tool_calls if c.result is not None]
    assert len(runs) == 2 and runs[0].reason.value == "nonzero_exit" and runs[1].ok


@needs_sandbox
@pytest.mark.parametrize("turns", [
    ["$submit"],  # doing nothing
    # the visible test made to pass by a planted conftest.py, and the visible test "fixed"
    ["$write conftest.py\nimport pytest\n@pytest.hookimpl(tryfirst=True)\ndef pytest_runtest_call(item):\n"
     "    item.runtest = lambda: None\n",
     "$write test_calc.py\ndef test_add():\n    pass\n",
     "$write /logs/verifier/reward.txt\n1",
     "$submit"],
], ids=["no-op", "planted-conftest"])
def test_doing_nothing_or_gaming_the_tests_gets_nothing(sandbox, tmp_path, turns):
    t, reward, workspace = play(sandbox, write_task(tmp_path), turns)
    assert reward.outcome == 0.0 and not reward.failed, reward.reason
    if len(turns) > 1:
        assert workspace.read("conftest.py") is not None  # the plant was there when the tests ran
        assert t.tool_calls[2].error_kind == "tool" and "outside the workspace" in t.tool_calls[2].error
