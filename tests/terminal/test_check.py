"""`tempering tasks check-shipped terminal`: the shipped tasks' oracles score 1 and no-ops 0 (CI runs a
fixed sample; bench/terminal_tasks.py runs them all); a task that cannot pass says why."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from tempering.sandbox.toolchain import MANIFEST, default_dir

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None or not (default_dir() / MANIFEST).is_file(),
                                reason="needs bubblewrap and the sandbox toolchain (scripts/setup.sh)")


def check(*args):
    return subprocess.run([sys.executable, "-m", "tempering.cli", "tasks", "check-shipped", "terminal", "--json",
                           *args], capture_output=True, text=True, timeout=600)


def test_a_fixed_sample_of_shipped_tasks_passes_the_check():
    r = check("--sample", "4", "--seed", "7")
    assert r.returncode == 0, r.stdout + r.stderr
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    assert len(rows) == 4 and all(row["ok"] and row["oracle"] == 1.0 and row["noop"] == 0.0 for row in rows)
    assert "4 of 4 tasks" in r.stderr


def test_a_task_the_sandbox_cannot_run_fails_the_check_with_its_reason():
    r = check("--tasks", "fix-median-even", "--set", "sandbox.toolchain=")  # no toolchain: no pytest
    assert r.returncode == 1
    (row,) = [json.loads(line) for line in r.stdout.splitlines()]
    assert not row["ok"] and "pytest" in row["reason"]
    assert check("--tasks", "no-such-task").returncode == 2
