import os
import subprocess

ENV = {**os.environ, "GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "safe.directory",
       "GIT_CONFIG_VALUE_0": "*", "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null"}


def git(*args):
    r = subprocess.run(["git", "-C", "/app", *args], capture_output=True, text=True, env=ENV, timeout=20)
    assert r.returncode == 0, (args, r.stderr)
    return r.stdout


from pathlib import Path


def test_restored():
    commits = git("rev-list", "--reverse", "main").split()
    assert len(commits) == 7, f"expected one new commit on top of 6, found {len(commits)}"
    assert git("log", "-1", "--format=%s", "main").strip() == "Restore config/settings.ini"
    changed = git("diff", "--name-status", "main~1", "main").split("\n")
    assert [c for c in changed if c] == ["A\tconfig/settings.ini"]
    expected = (Path(__file__).parent / "data" / "settings.ini").read_text()
    assert git("show", "main:config/settings.ini") == expected
    assert Path("/app/config/settings.ini").read_text() == expected


def test_history_kept():
    subjects = git("log", "--format=%s", "main~1").split("\n")
    assert [s for s in subjects if s] == ["Document usage", "Clean up config", "Raise worker count",
                                          "Add logging config", "Tune settings", "Initial service"]
    assert git("log", "-1", "--format=%ad %cd", "--date=iso-strict", "main~1").split() == \
        ["2024-04-06T10:00:00+00:00", "2024-04-06T10:00:00+00:00"]


def test_clean():
    assert git("symbolic-ref", "HEAD").strip() == "refs/heads/main"
    status = git("status", "--porcelain", "--untracked-files=all").splitlines()
    assert status == ["?? NOTES.md"], status
