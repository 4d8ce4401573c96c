"""What a sandbox is asked to run (`ExecRequest`, with its `Mount`s, its package layer and its
`ExecTag`), what every backend provides (`Sandbox`), how a caller ends a run early (`Abort`)
and how every backend reads the exit status of a program that ended by itself (`exit_reason`)."""

from __future__ import annotations

import dataclasses
import os
import posixpath
import re
import signal
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Mapping, Protocol

from tempering.records import ExecReason, ExecResult
from tempering.sandbox_paths import LAYER_MOUNT, MOUNT_RESERVED, WORKSPACE, within
from tempering.sandbox.guest.collect import check_name
from tempering.sandbox.workspace import Workspace

if TYPE_CHECKING:
    from tempering.config import SandboxConfig
    from tempering.sandbox.session import Session, SessionSpec
    from tempering.sandbox.toolchain import Toolchain

DEFAULT_WORKDIR = WORKSPACE
# Paths the sandbox itself owns (or mounts per job): no Mount may lie at or under them.
RESERVED_PATHS = MOUNT_RESERVED
LAYER_NAME = re.compile(r"[0-9a-f]{64}")  # a layer's name: the sha256 of what it holds (`sandbox.layers`)
# A request's limits that default to the `[sandbox]` section's keys of the same names.
LIMITS = ("time_limit_s", "memory_mb", "pids", "output_limit_bytes")


@dataclass(frozen=True)
class ExecTag:
    """Joins an execution to its sample in sandbox.jsonl. It changes nothing about the run
    itself; a node's scheduler orders jobs by its tenant (served) or domain (training) and
    whether it is an evaluation's."""

    sample: str = ""  # the sample id (task id + sample index); "" when not a sample
    turn: int = -1  # the episode turn that issued it (-1: set-up or verification)
    batch: int | None = None  # the rollout batch (training step) it belongs to; resume rewinds by it
    eval: str = ""  # the evaluation label ("baseline", "final", "step-000010") for eval samples
    domain: str = ""  # the sample's domain; "" when not a sample
    tenant: str = ""  # a served agent run's tenant: the node's scheduler orders its jobs by it


@dataclass(frozen=True)
class Mount:
    """A fresh filesystem (a tmpfs of `size_mb`; None: the sandbox's `disk_mb`, filled in when
    the request is resolved) at absolute `path` for one run, holding `content`; read-only unless
    `writable`. A writable one with `collect` comes back packed as a tar archive in
    `ExecResult.archives[path]` (at most `archive_limit` bytes). Read-only content must come
    from the host (a task folder): it is unpacked before the job's init drops its privileges
    (writable content is unpacked after)."""

    path: str
    content: Workspace = field(default_factory=Workspace)
    writable: bool = False
    collect: bool = False
    size_mb: int | None = None  # None: sandbox.disk_mb

    def __post_init__(self) -> None:
        p = self.path
        if not p.startswith("/") or p == "/" or posixpath.normpath(p) != p or "\0" in p:
            raise ValueError(f"Mount.path {p!r} must be an absolute, normalised path other than /")
        if within(p, RESERVED_PATHS):
            raise ValueError(f"Mount.path {p!r} lies in the sandbox's own {', '.join(RESERVED_PATHS)}")
        if self.collect and not self.writable:
            raise ValueError(f"Mount {p!r}: only a writable mount can be collected")
        if self.size_mb is not None and not 1 <= self.size_mb <= 1 << 20:
            raise ValueError(f"Mount {p!r}: size_mb must be in [1, {1 << 20}], got {self.size_mb}")

    @property
    def archive_limit(self) -> int:
        """The most a packed archive of this filesystem may hold: its content plus tar headers
        for as many files as a tmpfs of this size may hold (16384 inodes). Of a resolved
        request's mounts (`size_mb` set)."""
        assert self.size_mb is not None, "resolve the request first (ExecRequest.resolved)"
        return (self.size_mb << 20) * 2 + (8 << 20)


@dataclass(frozen=True)
class ExecRequest:
    """One program run. `files` are written into a fresh workspace (the working directory);
    files named in `collect` (workspace-relative) are read back after the run. Limits: wall
    clock (`time_limit_s`), memory including the job's tmpfs files (`memory_mb`), processes and
    threads (`pids`), and stdout plus stderr together (`output_limit_bytes`). A limit left None
    is the sandbox's: the `[sandbox]` key of the same name (`SandboxConfig`), the one place
    that holds these defaults. A backend fills them in (`resolved`) before it runs the
    request, so its result and its telemetry row are of the limits that applied.

    `mounts` adds filesystems at absolute paths (a session's workspace, a task's hidden tests,
    a log directory to read back; a mount's size left None is `[sandbox]`'s `disk_mb`, filled
    in by `resolved` too); `workdir` is the working directory, /workspace or one of the
    mounts (or inside one), where `files` go and `collect` names are read. `tag` labels the
    run in the sandbox's telemetry. `layer` names a built package layer (`sandbox.layers`),
    bound read-only at LAYER_MOUNT ("" for none); only the isolated backend's session
    sandboxes can bind one."""

    command: tuple[str, ...]
    files: Mapping[str, bytes] = field(default_factory=dict)
    stdin: bytes = b""
    env: Mapping[str, str] = field(default_factory=dict)
    time_limit_s: float | None = None  # None: sandbox.time_limit_s
    memory_mb: int | None = None  # None: sandbox.memory_mb
    pids: int | None = None  # None: sandbox.pids
    output_limit_bytes: int | None = None  # None: sandbox.output_limit_bytes
    collect: tuple[str, ...] = ()
    workdir: str = DEFAULT_WORKDIR
    mounts: tuple[Mount, ...] = ()
    tag: ExecTag = field(default_factory=ExecTag)
    layer: str = ""

    def __post_init__(self) -> None:
        self._check_limits()
        self._check_mounts()
        if self.layer and not LAYER_NAME.fullmatch(self.layer):
            raise ValueError(f"ExecRequest.layer {self.layer!r} is not a layer's name (64 hex digits)")

    def resolved(self, cfg: "SandboxConfig") -> "ExecRequest":
        """This request with each limit it leaves None taken from `cfg` (the sandbox's
        `[sandbox]` section), and each mount's size it leaves None from `cfg.disk_mb`: what a
        backend runs and logs. Raises ValueError, as the constructor does, when the files do
        not fit the memory limit that now applies."""
        unset = {key: getattr(cfg, key) for key in LIMITS if getattr(self, key) is None}
        if any(m.size_mb is None for m in self.mounts):
            unset["mounts"] = tuple(dataclasses.replace(m, size_mb=cfg.disk_mb) if m.size_mb is None else m
                                    for m in self.mounts)
        return dataclasses.replace(self, **unset) if unset else self

    def _check_limits(self) -> None:
        if not self.command or isinstance(self.command, str):
            raise ValueError("ExecRequest.command must name a program (a non-empty tuple of arguments)")
        for key in LIMITS:  # explicit values only: None is the sandbox's default, checked by its config
            value = getattr(self, key)
            if value is not None and not value > 0:
                raise ValueError(f"ExecRequest.{key} must be positive (or None for the sandbox's default): {value}")
        # The job's init holds the files (encoded and decoded) and the archives (raw, then
        # unpacked into a tmpfs) inside the job's memory limit; checked once that limit is known
        # (here when given, else when the backend resolves it).
        if self.memory_mb is not None:
            size = sum(len(data) for data in self.files.values())
            if size * 4 > self.memory_mb << 20:
                raise ValueError(f"ExecRequest.files hold {size} bytes: more than a quarter of "
                                 f"memory_mb={self.memory_mb}")
            packed = sum(len(m.content.archive) for m in self.mounts)
            if size * 4 + packed * 3 > self.memory_mb << 20:
                raise ValueError(f"ExecRequest.mounts hold {packed} bytes of archives: with the files, more than "
                                 f"memory_mb={self.memory_mb} holds (archives count 3 times: raw, unpacked, "
                                 f"packed back)")
        for name in (*self.files, *self.collect):
            try:
                check_name(name)  # the same check the guest makes before writing or reading a file
            except ValueError:
                raise ValueError(f"ExecRequest file name {name!r} must be a plain path inside the workspace") from None
        for key, value in self.env.items():
            if not key or "=" in key or "\0" in key or "\0" in value:
                raise ValueError(f"ExecRequest.env entry {key!r} is not a valid environment variable")

    def _check_mounts(self) -> None:
        paths = [m.path for m in self.mounts]
        for i, p in enumerate(paths):
            for q in paths[i + 1:]:
                if p == q or q.startswith(p + "/") or p.startswith(q + "/"):
                    raise ValueError(f"ExecRequest.mounts {p!r} and {q!r} overlap")
        w = self.workdir
        if not w.startswith("/") or posixpath.normpath(w) != w or "\0" in w:
            raise ValueError(f"ExecRequest.workdir {w!r} must be an absolute, normalised path")
        if w != DEFAULT_WORKDIR and not any(w == p or w.startswith(p + "/") for p in paths):
            raise ValueError(f"ExecRequest.workdir {w!r} must be {DEFAULT_WORKDIR} or lie in one of the mounts {paths}")


class Abort:
    """Ends the runs it is passed to: `fire()`, from any thread, makes a run in progress end at
    once with reason `killed` (and every later run given it, before it starts). A pipe, so a
    backend waits on it together with the job's output; a waiter that holds no descriptor (a job
    queued for a slot) is told by `when_fired`. `close()` once no run uses it."""

    def __init__(self) -> None:
        self._read, self._write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._lock = threading.Lock()
        self._listeners: list[Callable[[], None]] = []
        self.fired = False

    def when_fired(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call `callback` (quick, from the firing thread) when fired, now if it was. -> what
        forgets it again."""
        with self._lock:
            if not self.fired:
                self._listeners.append(callback)
                return lambda: self._forget(callback)
        callback()
        return lambda: None

    def _forget(self, callback: Callable[[], None]) -> None:
        with self._lock:
            if callback in self._listeners:
                self._listeners.remove(callback)

    def fileno(self) -> int:
        return self._read

    def fire(self) -> None:
        with self._lock:  # never write to a closed descriptor: its number may be reused
            self.fired = True
            if self._write >= 0:
                try:
                    os.write(self._write, b"x")
                except BlockingIOError:
                    pass  # the pipe is full: it is readable either way
            listeners, self._listeners = self._listeners, []
        for callback in listeners:
            callback()

    def close(self) -> None:
        with self._lock:
            for fd in (self._read, self._write):
                if fd >= 0:
                    os.close(fd)
            self._read = self._write = -1


class Sandbox(Protocol):
    """A backend. `run` may be called from many threads at once and never raises for what the
    program does or for its own failures (those are `reason=sandbox_error`); `abort`, when
    given, ends the run early (reason `killed`). It runs the request with the limits it leaves
    None taken from the backend's `[sandbox]` config (`ExecRequest.resolved`; a ValueError
    from that, files too large for the configured memory limit, is the caller's). Its sessions
    take their per-command defaults from the same config. `open_session` gives an episode a
    persistent workspace over many runs (`session.Session`), whose commands go through `runner`'s
    `run` when given (a node's scheduler in front of the backend); `toolchain` is what its
    sessions see (None: none); `close` ends the backend."""

    name: str
    toolchain: "Toolchain | None"

    def run(self, request: ExecRequest, abort: Abort | None = None) -> ExecResult: ...

    def open_session(self, spec: "SessionSpec", runner: "Sandbox | None" = None) -> "Session": ...

    def close(self) -> None: ...


def exit_reason(exit_code: int, out_of_memory: bool) -> ExecReason:
    """Why a program that the host did not end (deadline, output cap) ended: `exit_code` as
    subprocess gives it (-N: killed by signal N); `out_of_memory` is the backend's evidence."""
    if exit_code == 0:
        return ExecReason.OK
    if out_of_memory:
        return ExecReason.OOM
    if exit_code == -signal.SIGXCPU:
        return ExecReason.TIMEOUT  # the CPU-time rlimit backstop fired
    if exit_code < 0:
        return ExecReason.KILLED
    return ExecReason.NONZERO_EXIT
