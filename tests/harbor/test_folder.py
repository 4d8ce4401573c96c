"""Reading task folders without running anything: the Dockerfile's instructions into workspace
steps (hand-computed workspaces), task.toml, the needs scripts reveal, and reward files."""

from __future__ import annotations

import pytest

from harbor_helpers import make_task
from tempering.sandbox.workspace import Workspace
from tempering.tasks.harbor import Unrunnable, load, read_reward
from tempering.tasks.harbor.dockerfile import Copy, Run, Unsupported, interpret
from tempering.tasks.harbor.needs import find


def built(env) -> Workspace:
    ws = Workspace()
    for step in env.steps:
        if isinstance(step, Copy):
            ws = step.apply(ws)
    return ws


def test_copy_workdir_env_and_run_are_interpreted(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.py").write_text("a")
    (tmp_path / "run.sh").write_text("#!/bin/sh")
    (tmp_path / "data.txt").write_text("d")
    text = """# syntax=docker/dockerfile:1
ARG BASE=python:3.13-slim
FROM ${BASE} AS main
ARG VERSION=1.2
ENV APP_HOME=/app LANG="C.UTF-8"
ENV LEGACY value with spaces
WORKDIR $APP_HOME
COPY src/ ./src/
COPY --chmod=755 run.sh bin/
COPY data.txt renamed.txt
COPY ["data.txt", "data/"]
WORKDIR sub/dir
RUN echo $VERSION \\
    && touch made   # built in /app/sub/dir
WORKDIR /app
RUN ["python3", "-c", "print(1)"]
CMD ["python3", "app.py"]
EXPOSE 8000
"""
    env = interpret(text, tmp_path)
    assert env.workdir == "/app" and env.base_image == "python:3.13-slim"
    assert env.env == {"APP_HOME": "/app", "LANG": "C.UTF-8", "LEGACY": "value with spaces"}
    ws = built(env)
    assert ws.files() == {"src/a.py": b"a", "bin/run.sh": b"#!/bin/sh", "renamed.txt": b"d", "data/data.txt": b"d"}
    assert ws.mode("bin/run.sh") == 0o755 and ws.kind("sub/dir") == "dir"
    runs = [s for s in env.steps if isinstance(s, Run)]
    assert runs[0].argv[:2] == ("/bin/sh", "-c") and "touch made" in runs[0].argv[2]
    assert runs[0].env["VERSION"] == "1.2" and runs[1].argv == ("python3", "-c", "print(1)")
    assert runs[0].cwd == "/app/sub/dir" and runs[0].command[3:5] == ("/app/sub/dir", "/bin/sh") and not runs[1].cwd
    assert "VERSION" not in env.env  # ARG is for the build only
    assert any("CMD" in n for n in env.notes) and any("EXPOSE" in n for n in env.notes)


@pytest.mark.parametrize("text, why", [
    ("FROM a AS build\nRUN make\nFROM b\nWORKDIR /app\n", "multi-stage"),
    ("FROM b\nWORKDIR /app\nCOPY --from=build /out /app/\n", "COPY --from"),
    ("FROM b\nWORKDIR /app\nCOPY x.txt /etc/x.txt\n", "outside the final WORKDIR"),
    ("FROM b\nWORKDIR /app\nADD https://example.com/f.tgz .\n", "URL or an archive"),
    ("FROM b\nWORKDIR /app\nRUN <<EOF\necho hi\nEOF\n", "heredocs"),
    ("FROM b\nWORKDIR /app\nCOPY missing.txt .\n", "does not exist in the build context"),
    ("FROM b\nWORKDIR /app\nCOPY ../secret .\n", "outside the build context"),
    ("FROM b\nRUN true\n", "final WORKDIR is /"),
    ("FROM b\nWORKDIR /app\nFOO bar\n", "unknown or unsupported instruction"),
])
def test_what_cannot_be_honoured_is_refused_with_the_reason(tmp_path, text, why):
    (tmp_path / "ctx").mkdir()
    (tmp_path / "ctx" / "x.txt").write_text("x")
    (tmp_path / "secret").write_text("s")
    with pytest.raises(Unsupported, match=why):
        interpret(text, tmp_path / "ctx")


def test_a_folder_is_loaded_with_its_config_and_needs(tmp_path):
    toml = ('[environment]\nmemory = "1G"\nstorage_mb = 100\ncpus = 2\n[verifier]\ntimeout_sec = 30\n'
            '[verifier.env]\nMODE = "strict"\n[tempering]\npython_packages = ["numpy"]\ncommands = ["git"]\n')
    dockerfile = "FROM x\nWORKDIR /app\nRUN pip install requests==2.31 && apt-get install -y jq\n"
    task = make_task(tmp_path, dockerfile=dockerfile,
                     solve="#!/bin/bash\npip install six==1.16.0 .\n")
    (task / "task.toml").write_text(toml)
    t = load(task)
    assert (t.config.memory_mb, t.config.storage_mb, t.config.cpus, t.config.verifier_timeout_s) == (1024, 100, 2.0, 30.0)
    assert t.config.verifier_env == {"MODE": "strict"} and t.workdir == "/app" and t.id == "answer"
    # The environment's: [tempering], RUN lines and solve.sh (`pip install .` names no package); the tests' own.
    assert t.setup_needs.python == ("numpy", "requests==2.31", "six==1.16.0") and t.setup_needs.apt == ("jq",)
    assert t.test_needs.isolated == ("pytest==8.4.1", "pytest-json-ctrf==0.3.5") and not t.test_needs.python
    assert t.needs.apt == ("jq", "curl") and t.needs.commands == ("git", "pytest")
    assert t.tests.read("test.sh") is not None and t.solution.read("solve.sh") is not None


@pytest.mark.parametrize("broken, why", [
    ("instruction.md", "no instruction.md"), ("tests/test.sh", "no tests/test.sh"),
])
def test_a_broken_folder_is_refused_with_the_reason(tmp_path, broken, why):
    task = make_task(tmp_path)
    (task / broken).unlink()
    with pytest.raises(Unrunnable, match=why):
        load(task)
    (task / broken).write_text("x")
    (task / "task.toml").write_text("[verifier]\ntimeout_sec = -1\n")
    with pytest.raises(Unrunnable, match="verifier.timeout_sec must be a positive number"):
        load(task)


def test_installers_in_scripts_are_needs():
    n = find("sudo apt-get install -y --no-install-recommends gcc make=4.3 && pip3 install -q 'numpy>=1' \\\n"
             "  scipy; python3 -m pip install --index-url http://x flask; uv pip install rich\n"
             "uvx --with=polars -w attrs ruff check .; pip install $EXTRA\n")
    assert n.python == ("numpy>=1", "scipy", "flask", "rich") and n.isolated == ("polars", "attrs")
    assert n.apt_names == ["gcc", "make"] and n.commands == ("ruff",)
    # Options with values are skipped whole; local paths and URLs are no package's name.
    n = find("uvx --index-strategy unsafe-best-match -p 3.13 --with 'a==1,b' pytest -q\n"
             "pip install -e . ./pkg /abs/x.whl https://h/p.tar.gz 'c[extra]>=2' --python-version 3.11\n")
    assert n.commands == ("pytest",) and n.isolated == ("a==1", "b") and n.python == ("c[extra]>=2",)


@pytest.mark.parametrize("files, reward, why", [
    ({"reward.txt": b"1\n"}, 1.0, "reward.txt"),
    ({"reward.txt": b" 0.25 "}, 0.25, "reward.txt"),
    ({"reward.json": b'{"reward": 0.5, "extra": 2}', "reward.txt": b"1"}, 0.5, "reward.json"),  # json first
    ({"reward.json": b'{"accuracy": 0.75}'}, 0.75, "reward.json"),
    ({"reward.json": b'{"a": 1, "b": 0}'}, None, "not exactly one number"),
    ({"reward.json": b"[1]"}, None, "not exactly one number"),
    ({"reward.json": b"{"}, None, "not JSON"),
    ({"reward.txt": b""}, None, "does not hold a number"),
    ({"reward.txt": b"yes"}, None, "does not hold a number"),
    ({"reward.txt": b"nan"}, None, "not a finite number"),
    ({}, None, "wrote no reward"),
])
def test_reward_files_are_read_as_harbor_reads_them(files, reward, why):
    rewards, reason = read_reward(files)
    assert rewards.get("reward") == reward and why in reason


def test_copy_outside_the_workdir_fills_folders_of_their_own(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "in.csv").write_text("a,b\n")
    (tmp_path / "tool.sh").write_text("echo\n")
    env = interpret("FROM b\nWORKDIR /srv/app\nCOPY data /data\nCOPY tool.sh /opt/tool/bin/\n"
                    "COPY data/in.csv /srv/in/\nCOPY --from=ghcr.io/astral-sh/uv:0.9 /uv /uvx /bin/\n", tmp_path)
    assert {path: ws.names() for path, ws in env.outside.items()} == {
        "/data": ["in.csv"], "/opt/tool": ["bin", "bin/tool.sh"], "/srv/in": ["in.csv"]}
    assert not env.steps and "the toolchain's uv and uvx stand in" in env.notes[0]
    for text, why in (("COPY tool.sh /usr/local/bin/", "sandbox's own system"),
                      ("COPY tool.sh /opt/toolchain/x/", "sandbox's own system"),
                      ("COPY tool.sh /tool.sh", "is a file outside"),
                      ("COPY data /srv/", "holds the final WORKDIR"),
                      ("COPY --from=ghcr.io/astral-sh/uv:0.9 /etc/x /srv/app/", "COPY --from")):
        with pytest.raises(Unsupported, match=why):
            interpret(f"FROM b\nWORKDIR /srv/app\n{text}\n", tmp_path)
