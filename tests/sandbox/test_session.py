"""Sandbox sessions: a workspace that persists over confined commands, budgets, the limits of
one-shot jobs still holding inside a session, and hostile archives refused inside the sandbox.
Each check is judged from the host: the workspace archive it holds, the result's reason, the
telemetry rows."""

from __future__ import annotations

import io
import json
import os
import signal
import tarfile
import threading

import pytest

from sandbox_helpers import host_cmdlines_containing, needs_bwrap, sandbox_processes, wait_until
from tempering.records import ExecReason
from tempering.sandbox import ExecRequest, ExecTag, Mount, SessionSpec, Workspace


SH = ("bash", "-c")


def sh(session, script: str, **kw):
    return session.run((*SH, script), **kw)


@needs_bwrap
def test_commands_see_earlier_writes_at_the_workdir(sandbox):
    start = Workspace.from_files({"src/main.py": b"print('hi')\n"})
    with sandbox.open_session(SessionSpec(workdir="/app", workspace=start, disk_mb=8)) as s:
        r = sh(s, "pwd; python3 src/main.py; mkdir -p out/deep && echo 1 > out/deep/n && chmod 751 out/deep/n; "
                  "ln -s out/deep/n link; ln -s /etc/passwd abs; mkdir -m 700 private; echo h > $HOME/h")
        assert r.ok and r.stdout == "/app\nhi\n", r
        r = sh(s, "stat -c '%a %F' out/deep/n private; readlink link abs; cat link; cat $HOME/h; echo $HOME; "
                  "echo x >> out/deep/n")
        assert r.ok, r
        assert r.stdout.split("\n") == ["751 regular file", "700 directory", "out/deep/n", "/etc/passwd", "1",
                                        "h", "/root", ""]
        ws = s.workspace
    assert ws.read("out/deep/n") == b"1\nx\n" and ws.mode("out/deep/n") == 0o751
    assert ws.kind("link") == "symlink" and ws.kind("private") == "dir" and ws.read("src/main.py") == b"print('hi')\n"
    assert "h" not in ws.names()  # HOME is outside the workspace


@needs_bwrap
def test_a_file_written_on_the_host_is_seen_by_the_next_command(sandbox):
    with sandbox.open_session(SessionSpec(workdir="/srv/project")) as s:
        assert sh(s, "echo made > made.txt").ok
        s.write_file("given.txt", b"from the host\n")
        s.write_file("/srv/project/abs.txt", b"absolute\n")
        r = sh(s, "cat given.txt abs.txt; pwd")
        assert r.stdout == "from the host\nabsolute\n/srv/project\n", r
        assert s.read_file("made.txt") == b"made\n" and s.read_file("missing") is None


@needs_bwrap
def test_budgets_refuse_further_commands_without_running_them(sandbox):
    with sandbox.open_session(SessionSpec(max_commands=2)) as s:
        assert sh(s, "echo 1 > a").ok and sh(s, "echo 2 > b").ok
        r = sh(s, "echo 3 > c")
        assert r.reason == ExecReason.BUDGET and "max_commands=2" in r.error and r.exit_code is None
        assert s.workspace.read("c") is None and s.usage.commands == 2
    with sandbox.open_session(SessionSpec(wall_s=0.5)) as s:
        r = sh(s, "sleep 30")  # its own limit would be 5 s: the session's budget cuts it to 0.5 s
        assert r.reason == ExecReason.TIMEOUT, r
        r = sh(s, "echo never > n")
        assert r.reason == ExecReason.BUDGET and "wall_s" in r.error and s.workspace.read("n") is None
    with sandbox.open_session(SessionSpec(cpu_s=0.2, max_commands=50)) as s:
        results = [sh(s, "while :; do :; done") for _ in range(20)]
        refused = [r for r in results if r.reason == ExecReason.BUDGET]
        assert refused and "cpu_s" in refused[0].error, results
        ran = [r for r in results if r.reason != ExecReason.BUDGET]
        assert all(r.reason == ExecReason.TIMEOUT for r in ran) and s.usage.commands == len(ran)


@needs_bwrap
def test_one_shot_limits_hold_inside_a_session(sandbox):
    with sandbox.open_session(SessionSpec(workdir="/app")) as s:
        assert sh(s, "echo kept > kept").ok
        r = sh(s, "sleep 100", time_limit_s=0.5)
        assert r.reason == ExecReason.TIMEOUT and r.exit_code == -signal.SIGKILL, r
        r = s.run(("python3", "-c", "b = []\nwhile True:\n    b.append(bytearray(8 << 20))"), memory_mb=64)
        assert r.reason == ExecReason.OOM and r.peak_memory_mb <= 65, r
        r = s.run(("python3", "-c", "import sys\nfor _ in range(64):\n    sys.stdout.write('x' * 65536)"))
        assert r.ok and r.truncated and len(r.stdout.replace("x", "")) < 100, r.reason  # head, cut, tail
        baseline = len(sandbox_processes(sandbox))  # this sandbox's: other runs start their own
        r = s.run(("python3", "-c", "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n"
                                    "        pass"), time_limit_s=1.0)
        assert r.reason == ExecReason.TIMEOUT
        assert wait_until(lambda: len(sandbox_processes(sandbox)) <= baseline)
        r = sh(s, "cat kept; ls /tmp")  # the workspace survived all of it; /tmp did not
        assert r.ok and r.stdout == "kept\n", r


@needs_bwrap
def test_the_workspace_is_capped_by_disk_mb(sandbox):
    with sandbox.open_session(SessionSpec(disk_mb=2)) as s:
        r = sh(s, "head -c 5000000 /dev/zero > big; echo $?")
        assert r.stdout.strip() != "0" and "No space left" in r.stderr, r
        assert 1 << 20 < s.workspace.size <= 2 << 20
    with pytest.raises(ValueError, match="over disk_mb=1"):
        SessionSpec(disk_mb=1, workspace=Workspace.from_files({"f": b"x" * (2 << 20)}))


@needs_bwrap
def test_read_only_mounts_stay_read_only_and_writable_ones_are_kept(sandbox):
    data = Workspace.from_files({"t.sh": b"echo tests"})
    spec = SessionSpec(workdir="/app", mounts=(Mount("/tests", data), Mount("/logs/agent", writable=True, collect=True)))
    with sandbox.open_session(spec) as s:
        r = sh(s, "bash /tests/t.sh; echo x > /tests/t.sh; rm /tests/t.sh; echo log >> /logs/agent/a.log; "
                  "touch /new 2>&1 | grep -c 'Read-only'")
        assert r.stdout.startswith("tests\n") and r.stdout.endswith("1\n"), r
        assert r.stderr.count("Read-only file system") == 2, r
        sh(s, "echo log2 >> /logs/agent/a.log")
        assert s.collected("/logs/agent").read("a.log") == b"log\nlog2\n"
    assert data.read("t.sh") == b"echo tests"


def evil_workspace(members: list[tuple[str, int, str]]) -> Workspace:
    """A workspace holding an archive the host would refuse, bypassing its check, to show that
    the guest refuses it too."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, kind, link in members:
            info = tarfile.TarInfo(name)
            info.type, info.linkname = kind, link
            tar.addfile(info, io.BytesIO(b"") if kind == tarfile.REGTYPE else None)
    ws = object.__new__(Workspace)
    object.__setattr__(ws, "archive", buf.getvalue())
    return ws


@needs_bwrap
@pytest.mark.parametrize("members", [
    [("/etc/evil", tarfile.REGTYPE, "")],
    [("../../evil", tarfile.REGTYPE, "")],
    [("link", tarfile.SYMTYPE, "/logs"), ("link/evil", tarfile.REGTYPE, "")],
    [("null", tarfile.CHRTYPE, "")],
    [("passwd", tarfile.LNKTYPE, "/etc/passwd")],
], ids=["absolute", "dot-dot", "through-symlink", "device", "hard-link"])
def test_the_guest_refuses_hostile_archives_too(sandbox, members):
    logs = Mount("/logs", writable=True, collect=True)
    req = ExecRequest(command=("bash", "-c", "echo ran > ran"), workdir="/app",
                      mounts=(Mount("/app", evil_workspace(members), writable=True, collect=True), logs))
    r = sandbox.run(req)
    assert r.reason == ExecReason.SANDBOX_ERROR and "archive member" in r.error, r
    assert r.archives == {} and r.stdout == ""  # the command never ran; nothing came back


@needs_bwrap
def test_closing_a_session_ends_its_command_and_leaks_nothing(sandbox):
    mark = f"sess-closed-{os.getpid()}"
    s = sandbox.open_session(SessionSpec())
    results = []
    t = threading.Thread(target=lambda: results.append(sh(s, f"exec -a {mark} sleep 600", time_limit_s=600)))
    t.start()
    try:
        assert wait_until(lambda: host_cmdlines_containing(mark), 30)
    finally:
        s.close()  # returns once the command has ended
    t.join(30)
    assert not t.is_alive() and results[0].reason == ExecReason.KILLED, results
    assert host_cmdlines_containing(mark) == []
    assert sh(s, "echo again").reason == ExecReason.KILLED  # refused once closed
    with pytest.raises(ValueError, match="closed"):
        s.write_file("x", b"")


@needs_bwrap
def test_every_command_is_tagged_in_the_log(sandbox):
    tag = ExecTag(sample="task-1/3", batch=7)
    with sandbox.open_session(SessionSpec(tag=tag)) as s:
        sh(s, "true", turn=2)
    with open(sandbox._log.path) as f:
        row = json.loads(f.read().splitlines()[-1])
    assert (row["sample"], row["turn"], row["batch"], row["eval"]) == ("task-1/3", 2, 7, "")
    assert row["mounts"] and row["pid"] > 0 and row["process"]


def test_the_unisolated_backend_gives_sessions_a_working_directory_only():
    from tempering.config import SandboxConfig
    from tempering.sandbox import make_sandbox

    sb = make_sandbox(SandboxConfig(backend="unisolated", allow_unisolated=True, toolchain=""))
    try:
        with sb.open_session(SessionSpec(workspace=Workspace.from_files({"a": b"1"}), max_commands=3)) as s:
            assert sh(s, "cat a; echo 2 > b; mkdir d; ln -s b l").stdout == "1"
            r = sh(s, "cat b l; ls")
            assert r.ok and r.stdout == "2\n2\na\nb\nd\nl\n", r
            assert s.workspace.kind("l") == "symlink" and s.read_file("b") == b"2\n"
        with pytest.raises(ValueError, match="workdir must be /workspace"):
            sb.open_session(SessionSpec(workdir="/app"))
        r = sb.run(ExecRequest(command=("true",), workdir="/app", mounts=(Mount("/app", writable=True),)))
        assert r.reason == ExecReason.SANDBOX_ERROR and "cannot provide /app" in r.error
    finally:
        sb.close()
