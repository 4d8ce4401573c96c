import os
import subprocess

ENV = {**os.environ, "GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "safe.directory",
       "GIT_CONFIG_VALUE_0": "*", "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null"}


def git(*args):
    r = subprocess.run(["git", "-C", "/app", *args], capture_output=True, text=True, env=ENV, timeout=20)
    assert r.returncode == 0, (args, r.stderr)
    return r.stdout


def test_answer():
    commits = git("rev-list", "--reverse", "main").split()
    assert len(commits) == 16, "the history was changed"
    answer = open("/app/first_bad_commit.txt").read()
    assert answer == commits[10] + "\n"


def test_repository_state():
    assert git("symbolic-ref", "HEAD").strip() == "refs/heads/main"
    assert git("rev-parse", "HEAD") == git("rev-parse", "main")
    status = git("status", "--porcelain", "--untracked-files=all").splitlines()
    assert status == ["?? first_bad_commit.txt"], status
    assert "percent / 1000" in git("show", "HEAD:pricing.py"), "the bug must stay"
