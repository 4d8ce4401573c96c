"""The `[sandbox]` limits are the defaults of every run that sets none of its own: a one-shot
job and a session command on either backend end by the configured deadline, memory, process and
output limits, and the telemetry row records the limits that applied; a session's workspace and
a mount left unsized get the configured disk_mb. An explicit limit still wins; `ExecRequest`,
`Mount`, `SessionSpec` and `SessionDefaults` hold no defaults of their own."""

from __future__ import annotations

import dataclasses

import pytest

from sandbox_helpers import last_logged, py
from tempering.config import SandboxConfig
from tempering.records import Budget, ExecReason
from tempering.sandbox import ExecRequest, Mount, SessionSpec, Workspace, make_sandbox, output
from tempering.sandbox.factory import SandboxUnavailable
from tempering.sandbox.session import SessionDefaults
from tempering.sandbox.unisolated import UnisolatedSandbox

LIMITED = SandboxConfig(workers=1, warm_pool=False, toolchain="", time_limit_s=1.0, memory_mb=64, pids=8,
                        output_limit_bytes=100, disk_mb=4)
APPLIED = {"time_s": 1.0, "memory_mb": 64, "pids": 8, "output_bytes": 100}
HOG = "b = []\nwhile True:\n    b.append(bytearray(16 << 20))"


@pytest.fixture(scope="module", params=["bwrap", "unisolated"])
def limited(request, tmp_path_factory):
    """A sandbox of each backend whose configured limits are far from the defaults."""
    log_dir = tmp_path_factory.mktemp(request.param)
    if request.param == "unisolated":
        sb = UnisolatedSandbox(LIMITED, log_dir=log_dir)
    else:
        try:
            sb = make_sandbox(LIMITED, log_dir=log_dir)
        except SandboxUnavailable as e:
            pytest.skip(f"no isolated sandbox here: {e}")
    yield sb
    sb.close()


def test_requests_and_session_defaults_hold_no_limits_of_their_own():
    req = ExecRequest(command=("true",))
    assert (req.time_limit_s, req.memory_mb, req.pids, req.output_limit_bytes) == (None, None, None, None)
    assert (Budget().time_limit_s, Budget().memory_mb) == (None, None)
    assert (Mount("/logs").size_mb, SessionSpec().disk_mb) == (None, None)
    with pytest.raises(TypeError):
        SessionDefaults()  # every limit comes from a config
    d = SessionDefaults.from_config(LIMITED)
    assert (d.time_limit_s, d.memory_mb, d.pids, d.output_limit_bytes, d.cpus, d.disk_mb) == (
        1.0, 64, 8, 100, LIMITED.cpus, 4)


def test_resolving_fills_only_what_the_request_leaves_unset():
    req = ExecRequest(command=("true",), memory_mb=32).resolved(LIMITED)
    assert (req.time_limit_s, req.memory_mb, req.pids, req.output_limit_bytes) == (1.0, 32, 8, 100)
    assert req.resolved(SandboxConfig()) == req  # nothing left to fill
    # The files-size check waits for the memory limit that applies, then refuses as before.
    big = ExecRequest(command=("true",), files={"big": b"x" * (4 << 20 | 1)})
    with pytest.raises(ValueError, match="quarter of memory_mb=16"):
        big.resolved(dataclasses.replace(LIMITED, memory_mb=16))
    assert big.resolved(SandboxConfig()).memory_mb == SandboxConfig().memory_mb
    # A mount's size too: unset ones get disk_mb, an explicit one is kept.
    mounted = ExecRequest(command=("true",), workdir="/app",
                          mounts=(Mount("/app", writable=True), Mount("/b", size_mb=3)))
    assert [m.size_mb for m in mounted.resolved(LIMITED).mounts] == [4, 3]


def test_a_job_without_limits_gets_the_configured_ones(limited):
    slow = limited.run(ExecRequest(command=("sleep", "10")))
    assert slow.reason == ExecReason.TIMEOUT and slow.wall_s < 4, slow
    assert last_logged(limited)["limits"] == APPLIED
    loud = limited.run(py("print('x' * 300)"))
    assert loud.ok and loud.truncated and loud.stdout == "x" * 50 + output.marker(201, 100).decode() + "x" * 49 + "\n"
    hog = limited.run(py(HOG))
    assert hog.reason == ExecReason.OOM, hog
    # An explicit limit still wins, and the row says so.
    wide = limited.run(py("print('x' * 300)", output_limit_bytes=1000))
    assert wide.ok and len(wide.stdout) == 301, wide
    assert last_logged(limited)["limits"] == {**APPLIED, "output_bytes": 1000}


def test_the_configured_pids_limit_applies_in_the_isolated_backend(limited):
    if limited.name != "bwrap":
        pytest.skip("the unisolated backend has no cgroup to count processes in (it says so at start)")
    threads = limited.run(py("import threading, time\nn = 0\ntry:\n    for _ in range(16):\n"
                             "        threading.Thread(target=time.sleep, args=(0.5,), daemon=True).start()\n"
                             "        n += 1\nexcept RuntimeError:\n    pass\nprint(n)"))
    assert threads.ok and 0 < int(threads.stdout) < 8, threads  # 8 tasks, the job's own included


def test_the_unisolated_backend_says_which_keys_it_cannot_enforce(capsys):
    UnisolatedSandbox(SandboxConfig()).close()
    assert capsys.readouterr().err == ""
    UnisolatedSandbox(LIMITED).close()
    assert "does not enforce sandbox.pids = 8" in capsys.readouterr().err


def test_a_session_command_without_limits_gets_the_configured_ones(limited):
    with limited.open_session(SessionSpec()) as s:
        slow = s.run(("sleep", "10"))
        assert slow.reason == ExecReason.TIMEOUT and slow.wall_s < 4, slow
        assert last_logged(limited)["limits"] == APPLIED
        loud = s.run(("bash", "-c", "head -c 300 /dev/zero | tr '\\0' x"))
        assert loud.ok and loud.stdout == "x" * 50 + output.marker(200, 100).decode() + "x" * 50, loud
        hog = s.run(("python3", "-c", HOG))
        assert hog.reason == ExecReason.OOM, hog
        wider = s.run(("sleep", "0"), time_limit_s=2.0, memory_mb=96)
        assert wider.ok and last_logged(limited)["limits"] == {**APPLIED, "time_s": 2.0, "memory_mb": 96}


def test_a_session_workspace_without_a_size_gets_the_configured_disk_mb(limited):
    with limited.open_session(SessionSpec()) as s:
        assert s.spec.disk_mb == 4
        # 5 MB do not fit (bwrap: the workspace's tmpfs; unisolated: the file-size rlimit) ...
        assert s.run(("bash", "-c", "head -c 5000000 /dev/zero > big; echo $?")).stdout.strip() != "0"
        assert s.run(("bash", "-c", "rm big; head -c 3000000 /dev/zero > fits; echo $?")).stdout.strip() == "0"
    with limited.open_session(SessionSpec(disk_mb=8)) as s:  # ... unless the session asks for more
        assert s.spec.disk_mb == 8
        assert s.run(("bash", "-c", "head -c 5000000 /dev/zero > big; echo $?")).stdout == "0\n"
    # Checked against the configured size when the session opens.
    with pytest.raises(ValueError, match="over disk_mb=4"):
        limited.open_session(SessionSpec(workspace=Workspace.from_files({"f": b"x" * (5 << 20)})))
