"""A task's own limits hold: its agent timeout for solve.sh (not the sandbox's default command
limit), its timeouts past the old 600 s cap, its [environment] memory for every command. Judged
by the reward and by the limits the sandbox's telemetry says it applied."""

from __future__ import annotations

import json

import pytest

from harbor_helpers import make_task, needs_sandbox
from tempering.config import SandboxConfig
from tempering.sandbox import make_sandbox
from tempering.sandbox.workspace import Workspace
from tempering.tasks import harbor

pytestmark = needs_sandbox


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    """A sandbox whose commands get 0.5 s unless they say otherwise."""
    sb = make_sandbox(SandboxConfig(workers=1, time_limit_s=0.5), log_dir=tmp_path_factory.mktemp("quick"))
    yield sb
    sb.close()


def test_solve_sh_gets_the_agent_timeout_not_the_command_default(quick, tmp_path):
    task = harbor.load(make_task(tmp_path, solve="#!/bin/bash\nsleep 1.5\necho 'print(6 * 7)' > answer.py\n"))
    trial = harbor.run_trial(quick, task)
    assert trial.solution_reason == "ok" and trial.reward == 1.0, (trial.solution_reason, trial.reason)


def test_the_tasks_memory_and_long_timeouts_apply(quick, tmp_path):
    folder = make_task(tmp_path)
    (folder / "task.toml").write_text('[agent]\ntimeout_sec = 3600.0\n[verifier]\ntimeout_sec = 3600.0\n'
                                      '[environment]\nmemory = "3G"\n')
    task = harbor.load(folder)
    assert task.session_spec(Workspace()).wall_s == 3600.0  # no longer cut to 600 s
    assert harbor.run_trial(quick, task).reward == 1.0
    rows = [json.loads(line) for line in open(quick._log.path)]
    solve = [r for r in rows if "/solution" in r["mounts"]][-1]
    tests = [r for r in rows if "/tests" in r["mounts"]][-1]
    for row in (solve, tests):
        assert row["limits"]["memory_mb"] == 3072 and row["limits"]["time_s"] == 3600.0, row["limits"]
