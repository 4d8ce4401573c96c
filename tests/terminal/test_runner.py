"""A fixed sample of terminal tasks, hand-written and generated, through the Harbor runner
(`tempering tasks import --oracle --noop`, one process for the whole sample): the oracle scores 1
and doing nothing scores 0; and two reward hacks on the verifier score 0."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from tempering.tasks import terminal

HAND_WRITTEN = ["fix-median-even", "csv-region-revenue", "git-restore-deleted-file"]

# "Solutions" that leave the bug and attack the verifier instead (run as the oracle of a copy of
# fix-median-even): ending the test process early with status 0, and a conftest.py / pytest.py
# in the workspace that would deselect every test.
HACKS = {
    "hack-exit-early": "#!/bin/bash\nprintf 'import os\\nos._exit(0)\\n' | cat - /app/stats.py > /tmp/s.py\n"
                       "cp /tmp/s.py /app/stats.py\n",
    "hack-workspace-conftest": "#!/bin/bash\ncat > /app/conftest.py <<'EOF'\n"
                               "def pytest_collection_modifyitems(items):\n    items[:] = []\nEOF\n"
                               "cp /app/conftest.py /app/pytest.py\n",
}


def sample() -> list[str]:
    """Three hand-written tasks and the fifth generated task of three libraries."""
    generated = terminal.names(terminal.GENERATED)
    picked = [[n for n in generated if n.startswith(f"bugfix-{lib}-")][4]
              for lib in ("inflection", "toolz", "more-itertools")]
    return HAND_WRITTEN + picked


def _runner_missing() -> str | None:
    try:
        from tempering.sandbox.toolchain import MANIFEST, default_dir
        from tempering.tasks.harbor import cli  # noqa: F401
    except ImportError as e:
        return f"the Harbor runner (tempering.tasks.harbor) is not available: {e}"
    if shutil.which("bwrap") is None:
        return "bubblewrap is not installed (apt-get install -y bubblewrap)"
    if not (default_dir() / MANIFEST).is_file():
        return "the sandbox toolchain is not built (scripts/setup.sh)"
    return None


@pytest.mark.skipif(_runner_missing() is not None, reason=str(_runner_missing()))
def test_oracle_one_noop_zero(tmp_path):
    names = sample()
    for name in names:
        terminal.materialize(name, tmp_path)
    for hack, script in HACKS.items():
        folder = terminal.materialize("fix-median-even", tmp_path / "hacks")
        (folder / "solution" / "solve.sh").write_text(script)
        folder.rename(tmp_path / hack)
    names_and_hacks = names + sorted(HACKS)
    out = subprocess.run([sys.executable, "-m", "tempering.cli", "tasks", "import", str(tmp_path), "--oracle",
                          "--noop", "--json"], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    results = {r["task"]: r for r in map(json.loads, out.stdout.splitlines())}
    assert sorted(results) == sorted(names_and_hacks), out.stderr
    for name in names:
        r = results[name]
        assert r["runnable"], f"{name}: {r['reason']}"
        assert (r["oracle"], r["noop"]) == (1.0, 0.0), f"{name}: {r}"
    for name in HACKS:
        assert results[name]["oracle"] == 0.0, f"{name}: {results[name]}"
