"""The isolated backend as a component: results, telemetry, warm and cold starts, recovery from
a dead sandbox, concurrent callers, and the start-up check."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import threading
from pathlib import Path

import pytest

from sandbox_helpers import needs_bwrap, py
from tempering.config import ConfigError, SandboxConfig, load_config
from tempering.records import ExecReason
from tempering.sandbox import ExecRequest, make_sandbox, output
from tempering.sandbox.factory import SandboxUnavailable
from tempering.sandbox.telemetry import FILENAME


def test_isolated_backend_is_the_default():
    cfg = SandboxConfig()
    assert cfg.backend == "bwrap" and cfg.warm_pool and not cfg.allow_unisolated


def test_missing_bwrap_is_named_in_a_clear_error():
    with pytest.raises(SandboxUnavailable) as e:
        make_sandbox(SandboxConfig(bwrap="/nonexistent/bwrap"))
    msg = str(e.value)
    assert "bubblewrap" in msg and "/nonexistent/bwrap" in msg and "allow_unisolated" in msg


def test_unisolated_needs_the_explicit_flag():
    with pytest.raises(SandboxUnavailable, match="allow_unisolated"):
        make_sandbox(SandboxConfig(backend="unisolated"))
    sb = make_sandbox(SandboxConfig(backend="unisolated", allow_unisolated=True))
    try:
        assert sb.run(py("print(6 * 7)")).stdout == "42\n"
    finally:
        sb.close()


def test_unisolated_takes_its_collect_limit_from_the_config():
    write = py("open('out.txt', 'w').write('0123456789')", collect=("out.txt",))
    for limit, files in ((4, {}), (10, {"out.txt": b"0123456789"})):
        sb = make_sandbox(SandboxConfig(backend="unisolated", allow_unisolated=True, collect_limit_bytes=limit))
        try:
            assert sb.run(write).files == files
        finally:
            sb.close()


def test_unisolated_caps_stdout_and_stderr_together():
    sb = make_sandbox(SandboxConfig(backend="unisolated", allow_unisolated=True))
    try:
        r = sb.run(py("import sys\nsys.stdout.write('o' * 40000)\nsys.stdout.flush()\nsys.stderr.write('e' * 40000)",
                      output_limit_bytes=65536))
    finally:
        sb.close()
    # Past the cap the program runs on; the head (both streams, in order) and each stream's tail are kept.
    assert r.ok and r.truncated, r
    cut = output.marker(80000 - 65536, 65536).decode()
    both = r.stdout + r.stderr
    assert both.count(cut) == 1 and len(both) - len(cut) == 65536, len(both)
    assert set(r.stdout.replace(cut, "")) == {"o"} and set(r.stderr.replace(cut, "")) == {"e"}
    assert r.stdout.startswith("o" * 1000) and r.stderr.endswith("e" * 1000)


def test_unisolated_keeps_its_deadline_while_stdin_is_unread():
    sb = make_sandbox(SandboxConfig(backend="unisolated", allow_unisolated=True))
    try:
        unread = sb.run(ExecRequest(command=("sleep", "5"), stdin=b"x" * (1 << 20), time_limit_s=0.5))
        read = sb.run(py("import sys; print(len(sys.stdin.buffer.read()))", stdin=b"x" * (3 << 20)))
    finally:
        sb.close()
    # Killed at its deadline: had the host waited on the unread pipe, `sleep 5` would have ended
    # by itself (exit status 0) before the host looked at the clock again.
    assert unread.reason == ExecReason.TIMEOUT and unread.exit_code == -signal.SIGKILL, unread
    assert read.ok and read.stdout == f"{3 << 20}\n", read


def test_config_refuses_paths_the_sandbox_mounts_over():
    for bad in ("/tmp/venv", "/", "relative", "/proc/1"):
        with pytest.raises(ConfigError, match="sandbox.ro_paths"):
            SandboxConfig(ro_paths=(bad,))
    assert load_config(None, ["--sandbox.ro_paths=['/srv/venv']"]).sandbox.ro_paths == ("/srv/venv",)


@needs_bwrap
def test_results_carry_output_exit_codes_and_telemetry(sandbox):
    r = sandbox.run(ExecRequest(command=("python3", "-c", "import sys; print(sys.stdin.read()[::-1]); "
                                         "import os; print(os.environ['K']); sys.exit(3)"),
                                stdin=b"abc", env={"K": "v"}))
    assert r.reason == ExecReason.NONZERO_EXIT and r.exit_code == 3
    assert r.stdout == "cba\nv\n" and r.start == "warm"
    assert r.wall_s > 0 and r.cpu_s > 0 and r.peak_memory_mb > 0
    missing = sandbox.run(ExecRequest(command=("no-such-program",)))
    assert missing.reason == ExecReason.NONZERO_EXIT and missing.exit_code == 127
    assert "cannot execute 'no-such-program'" in missing.stderr
    killed = sandbox.run(py("import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"))
    assert killed.reason == ExecReason.KILLED and killed.exit_code == -signal.SIGSEGV
    files = sandbox.run(ExecRequest(command=("sh", "-c", "cat in/a.txt > out.txt"),
                                    files={"in/a.txt": b"payload"}, collect=("out.txt",)))
    assert files.ok and files.files == {"out.txt": b"payload"}
    log = Path(sandbox._log.path)
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert lines[-1]["reason"] == "ok" and lines[-1]["files"] == ["out.txt"]
    assert {"wall_s", "cpu_s", "peak_memory_mb", "start", "exit_code", "setup_s"} <= set(lines[-1])
    assert log.name == FILENAME


@needs_bwrap
def test_concurrent_callers_beyond_the_pool_get_cold_sandboxes(sandbox, sandbox_cfg, monkeypatch):
    """Four callers at once on a pool of two: each caller, once it holds a sandbox, waits until
    all four hold one, so none can hand its sandbox back to a later caller (no timing decides
    which start is warm)."""
    together = threading.Barrier(4, timeout=120)  # a hang guard: cold starts on a loaded machine
    acquire = sandbox._pool.acquire

    def acquire_together():
        got = acquire()
        together.wait()
        return got

    monkeypatch.setattr(sandbox._pool, "acquire", acquire_together)
    results, errors = [], []
    lock = threading.Lock()

    def call(i):
        try:
            r = sandbox.run(py(f"print({i})"))
        except BaseException as e:  # noqa: BLE001 - reported below, not lost in the thread
            errors.append(e)
            together.abort()
            return
        with lock:
            results.append(r)

    threads = [threading.Thread(target=call, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert sorted(int(r.stdout) for r in results) == [0, 1, 2, 3]
    assert all(r.ok for r in results)
    warm = [r.start for r in results].count("warm")
    assert sandbox_cfg.workers == 2
    assert 1 <= warm <= 2, [r.start for r in results]  # the pool serves at most two, and does serve
    assert [r.start for r in results].count("cold") == 4 - warm


@needs_bwrap
def test_a_killed_sandbox_is_replaced(sandbox_cfg):
    sb = make_sandbox(dataclasses.replace(sandbox_cfg, workers=1))
    try:
        zygote = sb._pool._ready[0]
        os.kill(zygote.pid, signal.SIGKILL)
        zygote.proc.wait(timeout=5)
        r = sb.run(py("print('after')"))
        assert r.ok and r.stdout == "after\n" and r.start == "cold"
        again = sb.run(py("print('warm again')"))
        assert again.ok and again.start == "warm"
    finally:
        sb.close()


@needs_bwrap
def test_without_a_warm_pool_every_start_is_cold(sandbox_cfg):
    sb = make_sandbox(dataclasses.replace(sandbox_cfg, warm_pool=False))
    try:
        assert [sb.run(py("pass")).start for _ in range(2)] == ["cold", "cold"]
    finally:
        sb.close()


@needs_bwrap
def test_close_ends_every_sandbox_process(sandbox_cfg):
    from sandbox_helpers import sandbox_processes, still_running, wait_until

    sb = make_sandbox(sandbox_cfg)
    sb.run(py("pass"))
    running = sandbox_processes(sb)  # this sandbox's only: other runs' come and go meanwhile
    assert len(running) >= 2 * sandbox_cfg.workers, running  # a bwrap and its zygote per warm sandbox, at least
    tree = sb._tree
    sb.close()
    # None of those is left, nor anything else below a bwrap of this sandbox.
    assert wait_until(lambda: not still_running(running) and not sandbox_processes(sb)), still_running(running)
    assert not any(os.path.exists(f"{d}/{tree.name}") for d in tree.detection.dirs.values())


@needs_bwrap
def test_files_are_collected_even_after_a_timeout(sandbox):
    # The write must come before the deadline: a limit far above the job's start-up, even on a
    # loaded machine.
    r = sandbox.run(py("open('partial.txt', 'w').write('so far')\nimport time\ntime.sleep(60)",
                       time_limit_s=1.0, collect=("partial.txt",)))
    assert r.reason == ExecReason.TIMEOUT and r.files == {"partial.txt": b"so far"}, r


@needs_bwrap
def test_a_job_the_init_cannot_set_up_is_a_sandbox_error(sandbox):
    r = sandbox.run(ExecRequest(command=("true",), files={"a": b"file", "a/b": b"below a file"}))
    assert r.reason == ExecReason.SANDBOX_ERROR and "job setup failed" in r.error, r
    assert sandbox.run(py("print('fine')")).stdout == "fine\n"  # and the sandbox carries on
