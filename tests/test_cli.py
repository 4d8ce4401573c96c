"""The command line: bad input gives one clear error line and exit status 2, never a traceback."""

import subprocess
import sys

import pytest


def run(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "tempering.cli", *args], capture_output=True, text=True,
                          timeout=120, cwd=cwd)


@pytest.mark.parametrize("toml, words", [
    ("[trainer]\nlr = 'x'\n", ["bad.toml", "trainer.lr"]),
    ("[trainer\n", ["bad.toml", "not valid TOML"]),
    ("[tasks]\nweights = { chess = 1.0 }\n", ["unknown task domain 'chess'"]),
])
def test_bad_config_is_one_clear_line(tmp_path, toml, words):
    (tmp_path / "bad.toml").write_text(toml)
    r = run("train", "--config", str(tmp_path / "bad.toml"), f"--run.dir={tmp_path}/runs", cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr and r.stderr.startswith("error: ")
    for w in words:
        assert w in r.stderr


def test_unisolated_sandbox_must_be_allowed_explicitly(tmp_path):
    r = run("train", "--sandbox.backend=unisolated", "--sandbox.allow_unisolated=false",
            "--tasks.weights={code=1.0}", f"--run.dir={tmp_path}", "--run.steps=0")
    assert r.returncode == 2 and "allow_unisolated" in r.stderr and "Traceback" not in r.stderr


def test_bad_override_and_tasks_listing():
    r = run("train", "--trainer.nope=1")
    assert r.returncode == 2 and "trainer.nope" in r.stderr
    r = run("tasks")
    assert r.returncode == 0 and "arithmetic" in r.stdout and "code" in r.stdout
    r = run("tasks", "chess")
    assert r.returncode == 2 and "unknown task domain" in r.stderr
