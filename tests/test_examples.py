"""The example domain packages (examples/): installed by pip as a user installs them, found
through their entry points, their oracles score 1 and junk 0 (`tempering tasks check`), and a
2-step `tempering train` runs on them."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from run_helpers import ROOT, train_command

EXAMPLES = ("countdown", "units")


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The examples installed by pip (built as wheels from their folders) into a folder of their
    own, put on PYTHONPATH: the test environment itself is left as it is."""
    target = tmp_path_factory.mktemp("site")
    r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                        "--target", str(target), *(str(ROOT / "examples" / e) for e in EXAMPLES)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(target), *filter(None, [os.environ.get("PYTHONPATH")])])}


def tasks(env, *args):
    return subprocess.run([sys.executable, "-m", "tempering.cli", "tasks", *args], capture_output=True, text=True,
                          timeout=300, cwd=ROOT, env=env)


def test_the_examples_are_found_and_pass_the_check(site):
    listed = tasks(site, "list").stdout
    assert "example/countdown" in listed and "example/units" in listed
    r = tasks(site, "check", "example/countdown", "example/units", "--per-domain", "6", "--json")
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    assert r.returncode == 0 and len(rows) == 12 and all(row["ok"] for row in rows), r.stdout + r.stderr
    heldout = json.loads(tasks(site, "sample", "example/units", "--seed", "0", "--json").stdout)
    assert heldout["prompt"].endswith("=")


def test_two_steps_of_training_on_the_examples(site, tmp_path):
    mix = '--tasks.weights={"example/countdown" = 1.0, "example/units" = 1.0}'
    r = subprocess.run(train_command(tmp_path, "--run.name=examples", "--run.steps=2", mix), cwd=ROOT, env=site,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    rows = [json.loads(line) for line in (tmp_path / "examples" / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows] == [1, 2]
    summary = json.loads((tmp_path / "examples" / "summary.json").read_text())
    assert set(summary["baseline_per_domain"]) == {"example/countdown", "example/units"}, summary
