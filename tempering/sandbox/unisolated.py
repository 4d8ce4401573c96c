"""The unisolated backend: a child process with rlimits, a host-side deadline and an output cap
(its head and tail kept, `output.Capture`).

It does NOT isolate anything: the program sees the host filesystem, network and processes.
It exists for trusted code and for machines without bubblewrap, and the factory refuses it for
untrusted code unless `sandbox.allow_unisolated = true` says so explicitly. Its sessions get a
workspace only as the working directory (a temporary directory, /workspace as far as the
session is concerned): it cannot put filesystems at absolute paths or bind package layers,
and refuses to.
"""

from __future__ import annotations

import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tempering.config import SandboxConfig
from tempering.records import ExecReason, ExecResult
from tempering.sandbox.guest import archive, collect
from tempering.sandbox.output import STDERR, STDOUT, Capture
from tempering.sandbox.request import DEFAULT_WORKDIR, Abort, ExecRequest, Sandbox, exit_reason
from tempering.sandbox.session import Session, SessionDefaults, SessionSpec
from tempering.sandbox.telemetry import ExecLog
from tempering.sandbox.toolchain import Toolchain

_BASE_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1"}


class UnisolatedSandbox:
    name = "unisolated"

    def __init__(self, cfg: SandboxConfig | None = None, log_dir: str | Path | None = None,
                 toolchain: Toolchain | None = None) -> None:
        """`cfg` (default: the defaults) gives the limits a request leaves unset, as in the
        isolated backend: time_limit_s (a host-side deadline and a CPU rlimit), memory_mb (an
        address-space rlimit, looser than a cgroup), output_limit_bytes, and disk_mb (a
        file-size rlimit) and collect_limit_bytes. Not enforced here, for want of a cgroup:
        `pids` (recorded, not applied) and `cpus` (only sessions' CPU budgets use it)."""
        self._cfg = cfg = cfg or SandboxConfig()
        ignored = [f"sandbox.{k} = {getattr(cfg, k)}" for k in ("pids", "cpus")
                   if getattr(cfg, k) != getattr(SandboxConfig, k)]
        if ignored:  # set on purpose, and skipped here: say so
            print(f"tempering sandbox: the unisolated backend does not enforce {' or '.join(ignored)} "
                  f"(no cgroup; sandbox.backend = 'bwrap' does)", file=sys.stderr)
        self._disk_bytes, self._collect_limit = cfg.disk_mb << 20, cfg.collect_limit_bytes
        self._log = ExecLog(log_dir) if log_dir is not None else None
        self._toolchain = toolchain

    def run(self, request: ExecRequest, abort: Abort | None = None) -> ExecResult:
        request = request.resolved(self._cfg)  # unset limits: the config's (and the log says which applied)
        workspace = Path(tempfile.mkdtemp(prefix="tempering-ws-"))
        try:
            refused = _refusal(request)
            result = _error(refused) if refused else self._run_in(workspace, request, abort)
        except (OSError, ValueError) as e:
            result = _error(f"{type(e).__name__}: {e}")
        finally:
            shutil.rmtree(workspace, ignore_errors=True)
        if self._log is not None:
            self._log.write(self.name, request, result)
        return result

    def open_session(self, spec: SessionSpec, runner: Sandbox | None = None) -> Session:
        if spec.workdir != DEFAULT_WORKDIR or spec.mounts:
            raise ValueError(f"the unisolated backend gives a session its workspace as the working directory only: "
                             f"workdir must be {DEFAULT_WORKDIR} and mounts empty (got workdir={spec.workdir!r}, "
                             f"mounts={[m.path for m in spec.mounts]}); absolute paths need sandbox.backend = 'bwrap'")
        if spec.layer:
            raise ValueError("the unisolated backend cannot bind a package layer (sandbox.backend = 'bwrap' can)")
        tc = self._toolchain
        return Session(runner or self, spec, SessionDefaults.from_config(
            self._cfg, env=tc.session_env(str(tc.root)) if tc else {}, home=None))

    @property
    def toolchain(self) -> Toolchain | None:
        """The toolchain its sessions see (None: none)."""
        return self._toolchain

    def close(self) -> None:
        if self._log is not None:
            self._log.close()

    def _run_in(self, workspace: Path, req: ExecRequest, abort: Abort | None) -> ExecResult:
        for m in req.mounts:  # only the workspace itself (see _refusal)
            archive.extract(str(workspace), m.content.archive)
        for name, data in req.files.items():
            target = workspace / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        start = time.monotonic()
        proc = subprocess.Popen(
            # a file may be as large as the workspace (a session's may be larger than disk_mb), as in bwrap
            [*_limits(req, max([self._disk_bytes, *(m.size_mb << 20 for m in req.mounts)])), *req.command],
            cwd=workspace,
            env={**_BASE_ENV, "HOME": str(workspace), **req.env},
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            start_new_session=True, close_fds=True,
        )
        out, err, truncated, ended_by, peak_kb = _pump(proc, req, start + req.time_limit_s, abort)
        waited = _exit_of(proc.pid, start + req.time_limit_s) if ended_by is None else None
        if ended_by is None and waited is None:
            ended_by = ExecReason.TIMEOUT
        _kill_group(proc.pid)  # what it left running in the background
        _, status, usage = waited or os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)  # so Popen does not wait again
        wall = time.monotonic() - start
        stderr = err.decode(errors="replace")
        oom = "MemoryError" in stderr or "Cannot allocate memory" in stderr
        reason = ended_by or exit_reason(proc.returncode, oom)
        files, _skipped = collect.collect(str(workspace), list(req.collect), self._collect_limit)
        archives = {m.path: archive.pack(str(workspace), m.archive_limit)[0] for m in req.mounts if m.collect}
        return ExecResult(
            reason=reason, exit_code=proc.returncode,
            stdout=out.decode(errors="replace"), stderr=stderr, truncated=truncated, wall_s=wall,
            cpu_s=usage.ru_utime + usage.ru_stime, peak_memory_mb=peak_kb / 1024.0,
            start="cold", files=files, archives=archives,
        )


def _refusal(req: ExecRequest) -> str:
    """Why this backend cannot run `req` ("" if it can): it has no filesystems to mount."""
    others = [m.path for m in req.mounts if m.path != req.workdir or req.workdir != DEFAULT_WORKDIR]
    if req.layer:
        return "the unisolated backend cannot bind a package layer (sandbox.backend = 'bwrap' can)"
    if others:
        return (f"the unisolated backend cannot provide {', '.join(others)}: only the workspace at "
                f"{DEFAULT_WORKDIR} (absolute paths need sandbox.backend = 'bwrap')")
    return ""


def _error(message: str) -> ExecResult:
    return ExecResult(reason=ExecReason.SANDBOX_ERROR, exit_code=None, error=message)


def _limits(req: ExecRequest, file_bytes: int) -> list[str]:
    """rlimits through util-linux `prlimit`: unlike a preexec_fn it keeps subprocess on its
    vfork path (safe with threads, and the child's peak RSS is not the parent's)."""
    mem = req.memory_mb * 1024 * 1024
    cpu = int(req.time_limit_s) + 1
    return ["prlimit", f"--as={mem}", f"--cpu={cpu}", "--core=0", f"--fsize={file_bytes}", "--"]


def _pump(proc: subprocess.Popen, req: ExecRequest, deadline: float, abort: Abort | None):
    """Feed stdin and read stdout/stderr, without blocking, until EOF, the deadline or `abort`."""
    sel = selectors.DefaultSelector()
    streams = {proc.stdout: STDOUT, proc.stderr: STDERR}
    output = Capture(req.output_limit_bytes)
    for f in (*streams, proc.stdin):
        os.set_blocking(f.fileno(), False)
        sel.register(f, selectors.EVENT_WRITE if f is proc.stdin else selectors.EVENT_READ)
    if abort is not None:
        sel.register(abort, selectors.EVENT_READ)
    stdin = memoryview(req.stdin)
    ended_by = None
    peak_kb = 0
    while len(sel.get_map()) > (abort is not None):
        peak_kb = max(peak_kb, _high_water_kb(proc.pid))
        left = deadline - time.monotonic()
        if left <= 0:
            ended_by = ExecReason.TIMEOUT
            break
        if abort is not None and abort.fired:
            ended_by = ExecReason.KILLED
            break
        for key, _ in sel.select(timeout=min(left, 0.5)):
            if key.fileobj is abort:
                continue  # `fired` ends the run at the top of the loop
            if key.fileobj is proc.stdin:
                stdin = _feed(sel, proc.stdin, stdin)
                continue
            chunk = key.fileobj.read(65536)
            if not chunk:
                sel.unregister(key.fileobj)
                continue
            output.add(streams[key.fileobj], chunk)
    sel.close()
    proc.stdin.close()
    return *output.streams(), output.truncated, ended_by, peak_kb


def _exit_of(pid: int, deadline: float) -> tuple | None:
    """wait4's result once `pid` exits by the deadline, else None. A program closes its output
    before it exits (coreutils closes stdout and stderr in an atexit handler): killing it at end
    of output would end it by SIGKILL."""
    delay = 0.0005
    while True:
        found = os.wait4(pid, os.WNOHANG)
        if found[0]:
            return found
        if time.monotonic() >= deadline:
            return None
        time.sleep(delay)
        delay = min(delay * 2, 0.05)


def _feed(sel: selectors.BaseSelector, pipe, data: memoryview) -> memoryview:
    """Write what the pipe takes now; stop feeding (closing it) once all is in or the program
    closed its end. Returns what is left."""
    try:
        data = data[os.write(pipe.fileno(), data[:65536]):]
    except BlockingIOError:
        return data
    except BrokenPipeError:
        data = data[:0]
    if not data:
        sel.unregister(pipe)
        pipe.close()
    return data


def _high_water_kb(pid: int) -> int:
    """Peak RSS of the running program, sampled. wait4's ru_maxrss cannot be used: a vfork'ed
    child inherits the parent's (large) maxrss. Only the direct child is seen, and a very short
    program may end between samples; the isolated backend measures through cgroups instead."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError, ValueError):
        pass
    return 0


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass

