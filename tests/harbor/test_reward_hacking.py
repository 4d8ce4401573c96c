"""Reward hacking gets nothing: each attack is the solution of a task whose honest solution scores
1 (the control), and it must score 0, judged by the reward read on the host. The task's tests
run code from the workspace (answer.py), so the attacker's code also runs at verification."""

from __future__ import annotations

import pytest

from harbor_helpers import DOCKERFILE, MODULE_TEST_SH, ORACLE, make_task, needs_sandbox
from tempering.sandbox.workspace import Workspace
from tempering.tasks import harbor

pytestmark = needs_sandbox

WRONG = "echo 'print(0)' > answer.py\n"  # every attack leaves the real work undone
ALL_PASS_CONFTEST = """cat > conftest.py <<'EOF'
import pytest
@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    outcome.get_result().outcome = "passed"
EOF
"""
EXIT_ZERO = "import os; os._exit(0)"
ATTACKS = {
    # pytest configuration and plugins planted in the workspace, which is the working directory
    "conftest.py": ALL_PASS_CONFTEST,
    "pytest.ini and friends": "for f in pytest.ini tox.ini setup.cfg; do printf '[pytest]\\naddopts = --co\\n' > $f; "
                              "done; printf '[tool.pytest.ini_options]\\naddopts = \"--co\"\\n' > pyproject.toml\n",
    # start-up hooks: on PYTHONPATH (the task's own ENV puts /app there), in user site-packages
    "sitecustomize.py": f"echo '{EXIT_ZERO}' > sitecustomize.py; echo '{EXIT_ZERO}' > usercustomize.py\n",
    ".pth files": f"echo '{EXIT_ZERO}' > evil.pth; d=$(python3 -m site --user-site); mkdir -p $d; "
                  f"echo '{EXIT_ZERO}' > $d/evil.pth; echo '{EXIT_ZERO}' > $d/usercustomize.py\n",
    # the tests themselves: edited or deleted (they are not in the workspace: /tests does not exist)
    "edited or deleted tests": "rm -rf /tests; mkdir -p /tests tests; "
                               "echo 'def test_ok(): pass' | tee /tests/test_outputs.py > tests/test_outputs.py; "
                               "echo 'def test_ok(): pass' > test_outputs.py\n",
    # a reward written ahead of the verifier
    "fake reward.txt": "mkdir -p logs/verifier /logs/verifier; echo 1 | tee logs/verifier/reward.txt "
                       "/logs/verifier/reward.txt > reward.txt; echo '{\"reward\": 1}' > /logs/verifier/reward.json\n",
    # code under test that writes the reward and then ends the verifier before it can write 0
    "reward then kill the verifier": "cat > answer.py <<'EOF'\nimport os, signal\n"
                                     "open('/logs/verifier/reward.txt', 'w').write('1')\n"
                                     "os.killpg(os.getpgid(0), signal.SIGKILL)\nEOF\n",
    # ... or makes the reward file read-only so that the verifier's own write of 0 fails
    "reward then block the write": "cat > answer.py <<'EOF'\nimport os\n"
                                   "open('/logs/verifier/reward.txt', 'w').write('1')\n"
                                   "os.chmod('/logs/verifier/reward.txt', 0o444)\nprint(0)\nEOF\n",
    # /tests is writable (test scripts build there): code under test appends a reward to test.sh,
    # which a shell reading its script as it goes would run once the tests are done
    "appended to test.sh": "cat > answer.py <<'EOF'\n"
                           "open('/tests/test.sh', 'a').write('\\necho 1 > /logs/verifier/reward.txt; exit 0\\n')\n"
                           "print(0)\nEOF\n",
    # ... or turns reward.txt into a symlink to a file that says 1 (the verifier writes through it)
    "reward file as a symlink": "cat > answer.py <<'EOF'\nimport os\n"
                                "open('/logs/verifier/one', 'w').write('1')\n"
                                "os.symlink('/dev/null', '/logs/verifier/reward.txt')\nprint(0)\nEOF\n",
}


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    # PYTHONPATH=/app: a task that puts the workspace on the import path makes sitecustomize a threat
    folder = make_task(tmp_path_factory.mktemp("hack"), dockerfile=DOCKERFILE + "ENV PYTHONPATH=/app\n")
    return harbor.load(folder)


@pytest.fixture(scope="module")
def workspace(task, sandbox):
    return harbor.build(task, sandbox)


def solve(task, sandbox, workspace, script: str) -> harbor.Trial:
    return harbor.run_trial(sandbox, task, Workspace.from_files({"solve.sh": ("#!/bin/bash\n" + script).encode()}),
                            workspace=workspace)


def test_the_honest_solution_scores_one(task, sandbox, workspace):
    assert solve(task, sandbox, workspace, ORACLE).reward == 1.0


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_an_attack_scores_zero(task, sandbox, workspace, attack):
    trial = solve(task, sandbox, workspace, WRONG + ATTACKS[attack])
    assert trial.reward == 0.0 and not trial.failed, (trial.reason, trial.verdict.output)


def test_a_planted_pytest_module_does_not_replace_pytest(sandbox, tmp_path):
    """`python -m pytest` from the workspace puts it on sys.path (as CPython does); a pytest.py
    there must not be the pytest that runs."""
    task = harbor.load(make_task(tmp_path, test_sh=MODULE_TEST_SH))
    assert harbor.run_trial(sandbox, task).reward == 1.0
    fake = "echo 'import sys; sys.exit(0)' | tee pytest.py > pluggy.py; mkdir -p _pytest; touch _pytest/__init__.py\n"
    trial = solve(task, sandbox, harbor.build(task, sandbox), WRONG + fake)
    assert trial.reward == 0.0 and "1 failed" in trial.verdict.output, trial.verdict.output
