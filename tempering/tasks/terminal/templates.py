"""The files every Tempering terminal task shares: the verifier script, its pytest settings, the
conftest that imports the workspace's code explicitly, task.toml and the Dockerfile.

The hand-written tasks (data/terminal/tasks/) carry literal copies of what these functions
write; the generated bug-fix tasks are built from them at materialisation, and so is the
generator's own evaluation of each mutant (scripts/generate_mutation_tasks.py), with the
workspace at a temporary path instead of /app.

The verifier (tests/test.sh) resists the usual reward hacks: the tests run from /tests (pristine,
read-only) with their own pytest.ini, no cache provider and no bytecode written; the workspace is
put on sys.path by the conftest only long enough to import the code under test (a file in /app
cannot shadow a module the tests import later); the reward is 1 only if pytest exits 0 *and* its
JUnit report, written to a fresh temporary directory, shows at least one passed test and no
failure or error (code under test that calls `os._exit(0)` gets 0).
"""

from __future__ import annotations

import shlex

APP = "/app"

# What every task needs from the sandbox's toolchain (task.toml, [tempering] table).
BASE_COMMANDS = ("bash", "python3", "pytest")
BASE_PYTHON_PACKAGES = ("pytest",)

PYTEST_INI = """\
[pytest]
# The verifier's own settings: nothing from the workspace configures the test run.
addopts = -p no:cacheprovider
python_files = test_*.py
"""

TEST_SH = """\
#!/bin/bash
# Verifier: the hidden tests in /tests run against the code in /app. The reward is 1 only when
# pytest exits 0 and its JUnit report shows passed tests and no failure or error; anything else
# (a failing test, a crash, a timeout, a process that exits early) leaves the 0 written first.
# -x: the first failure settles the reward, so a wrong answer costs no more time than a right one.
mkdir -p /logs/verifier
echo 0 > /logs/verifier/reward.txt
export PYTHONDONTWRITEBYTECODE=1
report_dir="$(mktemp -d)"
cd /tests || exit 1
pytest -c /tests/pytest.ini --rootdir=/tests -p no:cacheprovider -q -rfE -x --tb=short \\
    --junitxml="$report_dir/report.xml" {targets}
status=$?
if [ "$status" -eq 0 ] && [ -f "$report_dir/report.xml" ] && python3 -I - "$report_dir/report.xml" <<'PYEOF'
import sys
import xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
count = lambda key: sum(int(s.get(key, 0)) for s in suites)
passed = count("tests") - count("failures") - count("errors") - count("skipped")
sys.exit(0 if passed > 0 and count("failures") == 0 and count("errors") == 0 else 1)
PYEOF
then
    echo 1 > /logs/verifier/reward.txt
fi
exit 0
"""


def test_sh(targets: list[str]) -> str:
    """tests/test.sh running pytest on `targets` (files or node ids relative to /tests)."""
    return TEST_SH.format(targets=" ".join(shlex.quote(t) for t in targets))


def conftest_header(imports: list[str], app: str = APP) -> str:
    """The start of /tests/conftest.py: import the code under test from the workspace `app`,
    check that it came from there, and take `app` off sys.path again."""
    names = ", ".join(repr(n) for n in imports)
    lines = [
        '"""Verifier set-up: the code under test is imported from the workspace, explicitly."""',
        "import importlib as _importlib",
        "import sys as _sys",
        "",
        f"_APP = {app!r}",
        f"for _name in ({names},):",
        "    _sys.modules.pop(_name, None)",
        "_sys.path.insert(0, _APP)",
        "try:",
        f"    for _name in ({names},):",
        "        _importlib.import_module(_name)",
        "finally:",
        "    _sys.path.remove(_APP)",
        f"for _name in ({names},):",
        '    _file = getattr(_sys.modules[_name], "__file__", None) or ""',
        '    if not _file.startswith(_APP + "/"):',
        '        raise ImportError(f"{_name} came from {_file!r}, not from the workspace {_APP}")',
        "",
    ]
    return "\n".join(lines) + "\n"


DOCKERFILE = """\
FROM python:3.11-slim
WORKDIR /app
COPY app/ /app/
"""


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    raise TypeError(f"no TOML for {type(v).__name__}")


def toml_table(name: str, values: dict) -> str:
    out = [f"[{name}]"]
    for k, v in values.items():
        if v is not None:
            out.append(f"{k} = {_toml_value(v)}")
    return "\n".join(out) + "\n"


def task_toml(*, difficulty: str, category: str, tags: list[str], origin: dict | None = None,
              commands=BASE_COMMANDS, python_packages=BASE_PYTHON_PACKAGES,
              verifier_timeout: float = 30.0, agent_timeout: float = 900.0,
              author: str = "Tempering") -> str:
    parts = ['version = "1.0"\n',
             toml_table("metadata", {"author_name": author, "difficulty": difficulty,
                                     "category": category, "tags": list(tags)})]
    if origin:
        parts.append(toml_table("metadata.origin", origin))
    parts += [
        toml_table("verifier", {"timeout_sec": verifier_timeout}),
        toml_table("agent", {"timeout_sec": agent_timeout}),
        toml_table("environment", {"build_timeout_sec": 120.0, "cpus": 1, "memory_mb": 1024,
                                   "storage_mb": 64}),
        "# What the task needs from the sandbox's toolchain; a runner that lacks any of it skips\n"
        "# the task and says why.\n"
        + toml_table("tempering", {"commands": list(commands), "python_packages": list(python_packages)}),
    ]
    return "\n".join(parts)
