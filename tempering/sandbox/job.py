"""The host side of one execution on a prepared init, from request to `ExecResult`.

The init is already idle in its namespaces and inside a fresh cgroup (`zygote.Prepared`). This
module writes the job's limits into that cgroup, makes the job's stdio pipes and hands the
init their other ends and the spec, then pumps stdin, stdout and stderr without blocking while
enforcing the wall-clock deadline and the caller's `Abort` from the host: each ends the job
by killing every process of its cgroup but the init, which then reports. Output past the cap
does not end it: its head and tail are kept (`output.Capture`). The init's report gives the
exit status, collected files, the archives of collected mounts (its raw tail) and how many
processes the command left running; the cgroup gives peak memory, CPU time and OOM kills. Failures of the machinery return `sandbox_error`, never raise. It does not choose or
prepare inits (the pool and the zygote do) or write the telemetry log (the backend does).
"""

from __future__ import annotations

import os
import select
import signal
import time
from dataclasses import dataclass, field
from typing import Callable

from tempering.records import ExecReason, ExecResult
from tempering.sandbox.bwrap import LOCALE, PATH
from tempering.sandbox.cgroups import CgroupError, Stats
from tempering.sandbox.guest import wire
from tempering.sandbox.output import STDERR, STDOUT, Capture
from tempering.sandbox.request import DEFAULT_WORKDIR, Abort, ExecRequest, exit_reason
from tempering.sandbox.zygote import Prepared
from tempering.sandbox_paths import WORKSPACE

BASE_ENV = {"PATH": PATH, "HOME": WORKSPACE, "TMPDIR": "/tmp", "LANG": LOCALE, "USER": "sandbox",
            "PYTHONDONTWRITEBYTECODE": "1"}
_CHUNK = 65536


@dataclass(frozen=True)
class Settings:
    """The per-sandbox knobs a job needs beyond its request."""

    cpus: float
    disk_mb: int
    collect_limit_bytes: int
    setup_timeout_s: float = 10.0  # to hand the job over
    grace_s: float = 2.0  # after a kill, for the guest's report


@dataclass
class Outcome:
    result: ExecResult
    healthy: bool  # False: the zygote misbehaved and must not serve another job
    skipped: dict = field(default_factory=dict)  # collect names refused, with why
    setup_s: float = 0.0


def execute(prepared: Prepared, req: ExecRequest, settings: Settings,
            dispatched: Callable[[], None] = lambda: None, abort: Abort | None = None) -> Outcome:
    """Run `req` on a prepared init (consumed). `dispatched` is called once the job is handed
    over: the caller may then have the next init prepared while this job runs. `abort`
    fired ends the job (reason killed)."""
    started = time.monotonic()
    channels = _Channels()
    try:
        return _run(prepared, req, channels, settings, started, dispatched, abort)
    except (OSError, CgroupError, wire.ProtocolError) as e:
        return Outcome(_error(f"{type(e).__name__}: {e}"), healthy=False)
    finally:
        channels.close()
        prepared.discard()  # the group is emptied and removed in the background


def _run(prepared: Prepared, req: ExecRequest, ch: "_Channels", settings: Settings, started: float,
         dispatched: Callable[[], None], abort: Abort | None) -> Outcome:
    prepared.group.limit(req.memory_mb << 20, req.pids, settings.cpus)
    sock = prepared.sock
    sock.settimeout(settings.setup_timeout_s)
    wire.send_fds(sock, wire.JOB, ch.guest_fds)
    ch.close_guest_ends()
    spec, tail = _spec(req, settings)
    wire.send_frame(sock, spec)
    if tail:
        sock.sendall(tail)
    go = time.monotonic()
    dispatched()
    pump = _Pump(ch, req, prepared, settings, abort)
    pump.run(go + req.time_limit_s)
    wall = time.monotonic() - go
    stats = prepared.group.stats()
    return _outcome(req, pump, stats, wall, settings, setup_s=go - started)


def _spec(req: ExecRequest, settings: Settings) -> tuple[dict, bytes]:
    """The spec frame and its raw tail (the mounts' archives, one after the other)."""
    mem = req.memory_mb << 20
    cpu = int(req.time_limit_s) + 1  # backstop only: the host's deadline comes first
    disk = max([settings.disk_mb, *(m.size_mb for m in req.mounts)]) << 20
    spec = {
        "argv": list(req.command), "env": {**BASE_ENV, **req.env},
        "files": wire.encode_files(dict(req.files)), "collect": list(req.collect),
        "collect_limit": settings.collect_limit_bytes,
        # RLIMIT_AS is a loose backstop (4x): the cgroup is the real memory limit, and a tight
        # address-space limit breaks runtimes that reserve virtual memory up front.
        "rlimits": {"AS": [max(4 * mem, 1 << 30)] * 2, "CPU": [cpu, cpu + 1],
                    "FSIZE": [disk] * 2, "CORE": [0, 0], "NOFILE": [1024, 1024]},
    }
    if req.workdir != DEFAULT_WORKDIR:
        spec["workdir"] = req.workdir
    if req.layer:
        spec["layer"] = req.layer
    if not req.mounts:
        return spec, b""
    spec["mounts"] = [{"path": m.path, "writable": m.writable, "collect": m.collect, "size_mb": m.size_mb,
                       "size": len(m.content.archive), "limit": m.archive_limit} for m in req.mounts]
    tail = b"".join(m.content.archive for m in req.mounts)
    spec["tail"] = len(tail)
    return spec, tail


class _Channels:
    """The job's stdio pipes; the guest's ends go to the init and are closed here."""

    def __init__(self) -> None:
        stdin_r, self.stdin_w = os.pipe()
        self.out_r, out_w = os.pipe()
        self.err_r, err_w = os.pipe()
        self.guest_fds = [stdin_r, out_w, err_w]
        self._open = [self.stdin_w, self.out_r, self.err_r, stdin_r, out_w, err_w]

    def close_guest_ends(self) -> None:
        for fd in self.guest_fds:
            self.close_fd(fd)

    def close_fd(self, fd: int) -> None:
        if fd in self._open:
            self._open.remove(fd)
            os.close(fd)

    def close(self) -> None:
        for fd in list(self._open):
            self.close_fd(fd)


class _Pump:
    """Moves bytes between the host and a running job until the guest reports."""

    def __init__(self, ch: _Channels, req: ExecRequest, prepared: Prepared, settings: Settings,
                 abort: Abort | None) -> None:
        self.ch, self.req, self.settings, self.abort = ch, req, settings, abort
        self.sock, self.group, self.init = prepared.sock, prepared.group, prepared.pid
        self.output = Capture(req.output_limit_bytes)
        self.ended_by: ExecReason | None = None
        tail_limit = sum(m.archive_limit for m in req.mounts if m.collect)
        self.report = wire.FrameReader(settings.collect_limit_bytes * 2 + (1 << 20), tail_limit)
        self.guest_gone = False
        self.guest_error = False  # the init could not start the job and sends ERROR + {"error"}
        self.heard = False
        self.stdin = memoryview(req.stdin)

    def run(self, deadline: float) -> None:
        ch = self.ch
        self.sock.setblocking(False)
        for fd in (ch.out_r, ch.err_r):
            os.set_blocking(fd, False)
        os.set_blocking(ch.stdin_w, False)
        poll = select.poll()
        for fd in (self.sock.fileno(), ch.out_r, ch.err_r):
            poll.register(fd, select.POLLIN)
        if self.stdin:
            poll.register(ch.stdin_w, select.POLLOUT)
        else:
            ch.close_fd(ch.stdin_w)
        if self.abort is not None:
            poll.register(self.abort.fileno(), select.POLLIN)
        final = None  # after a kill: how long the guest has left to report
        while self.report.frame is None and not self.guest_gone:
            now = time.monotonic()
            if self.ended_by is None and now >= deadline:
                self._end(ExecReason.TIMEOUT)
            if self.ended_by is None and self.abort is not None and self.abort.fired:
                self._end(ExecReason.KILLED)
            if self.ended_by is not None and final is None:
                final = time.monotonic() + self.settings.grace_s
            if final is not None and now >= final:
                break
            wait = (final if final is not None else deadline) - now
            for fd, _ in poll.poll(max(0, int(wait * 1000)) + 1):
                self._service(poll, fd)
        for fd in (ch.out_r, ch.err_r):  # the job's processes are gone: drain what they wrote
            while self._read_output(fd):
                pass

    def _service(self, poll: select.poll, fd: int) -> None:
        ch = self.ch
        if self.abort is not None and fd == self.abort.fileno():
            poll.unregister(fd)  # seen: `fired` ends the job at the top of the loop
        elif fd == self.sock.fileno():
            try:
                data = self.sock.recv(_CHUNK)
            except BlockingIOError:
                return
            if not data:
                self.guest_gone = True
                poll.unregister(fd)
                return
            if not self.heard:
                self.heard = True
                if data[:1] == wire.ERROR:
                    self.guest_error, data = True, data[1:]
            self.report.feed(data)
        elif fd == ch.stdin_w:
            try:
                n = os.write(fd, self.stdin[:_CHUNK])
            except BlockingIOError:
                return
            except BrokenPipeError:
                n = len(self.stdin)
            self.stdin = self.stdin[n:]
            if not self.stdin:
                poll.unregister(fd)
                ch.close_fd(fd)
        elif not self._read_output(fd):
            poll.unregister(fd)

    def _read_output(self, fd: int) -> bool:
        """Read one chunk; False at end of file or when nothing is waiting."""
        try:
            data = os.read(fd, _CHUNK)
        except BlockingIOError:
            return False
        if not data:
            return False
        self.output.add(STDOUT if fd == self.ch.out_r else STDERR, data)
        return True

    def _end(self, reason: ExecReason) -> None:
        """Kill every process of the job but its init, which then reaps, collects and reports."""
        self.ended_by = reason
        self.group.kill(spare=self.init)


def _outcome(req, pump: _Pump, stats: Stats, wall: float, settings: Settings, setup_s: float) -> Outcome:
    frame = pump.report.frame
    if pump.guest_error and frame is not None:
        return Outcome(_error(str(frame.get("error", "unknown guest error"))), healthy=True, setup_s=setup_s)
    stdout, stderr = (data.decode(errors="replace") for data in pump.output.streams())
    common = dict(stdout=stdout, stderr=stderr, truncated=pump.output.truncated,
                  wall_s=wall, cpu_s=stats.cpu_s, peak_memory_mb=stats.peak_bytes / 2**20)
    if frame is None:
        if pump.ended_by is not None:  # killed, and the guest did not report in time
            result = ExecResult(reason=pump.ended_by, exit_code=-signal.SIGKILL, **common)
            return Outcome(result, healthy=False, setup_s=setup_s)
        return Outcome(_error("the job's init ended without reporting", **common), healthy=False,
                       setup_s=setup_s)
    status = frame.get("status")
    if not isinstance(status, int):
        raise wire.ProtocolError(f"report without an exit status: {sorted(frame)}")
    exit_code = os.waitstatus_to_exitcode(status)
    files = wire.decode_files(frame.get("files", {}), settings.collect_limit_bytes)
    skipped = frame.get("skipped", {})
    archives, error = _archives(frame, pump.report.tail)
    reason = pump.ended_by or exit_reason(exit_code, stats.oom_kills > 0 or "MemoryError" in stderr[-2000:])
    lingering = frame.get("lingering", 0)
    result = ExecResult(reason=reason, exit_code=exit_code, files=files, archives=archives, error=error,
                        lingering=lingering if isinstance(lingering, int) else 0, **common)
    return Outcome(result, healthy=True, skipped=skipped if isinstance(skipped, dict) else {},
                   setup_s=setup_s)


def _archives(frame: dict, tail: bytes) -> tuple[dict[str, bytes], str]:
    """The collected mounts' archives (path -> bytes) from the report's tail, and why any
    could not be packed (the guest's words: too large, unreadable)."""
    sizes = frame.get("archives", {})
    if not isinstance(sizes, dict) or not all(isinstance(n, int) and n >= 0 for n in sizes.values()):
        raise wire.ProtocolError(f"report with malformed archive sizes: {sizes!r}")
    if sum(sizes.values()) != len(tail):
        raise wire.ProtocolError(f"report's archives hold {sum(sizes.values())} bytes, its tail {len(tail)}")
    archives, at = {}, 0
    for path, n in sizes.items():
        archives[path], at = tail[at:at + n], at + n
    errors = frame.get("archive_errors") or {}
    error = "; ".join(f"{path} was not packed: {why}" for path, why in errors.items()) if isinstance(errors, dict) else ""
    return archives, error


def _error(message: str, **fields) -> ExecResult:
    return ExecResult(reason=ExecReason.SANDBOX_ERROR, exit_code=None, error=message, **fields)
