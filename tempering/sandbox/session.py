"""Sandbox sessions: an episode's persistent workspace over many confined commands.

A `Session` holds its workspace on the host, as a `Workspace` archive. Each command is an
ordinary one-shot job of its backend (the same namespaces, cgroup, seccomp filter, deadline
and output cap as any other) whose filesystems are the session's: the workspace, writable at
`workdir` and packed back after the command, a HOME outside it that persists the same way
(seeded from the toolchain's skeleton), and the spec's extra mounts. Nothing of a session
lives in a sandbox between commands, so closing it, or the death of its process, leaves
nothing to reclaim; no background process outlives its command. Budgets: a number of
commands, and wall and CPU seconds over all of them; a command past them is refused without
running (reason `budget`), and each command's time limit is cut to what is left. `close`
ends a command in progress at once (reason `killed`) and refuses later ones. Thread-safe;
commands of one session run one at a time. Backends make sessions (`Sandbox.open_session`);
this module decides nothing about isolation.
"""

from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Mapping, Sequence

from tempering.records import ExecReason, ExecResult
from tempering.sandbox.request import DEFAULT_WORKDIR, Abort, ExecRequest, ExecTag, Mount
from tempering.sandbox.workspace import Workspace

if TYPE_CHECKING:
    from tempering.config import SandboxConfig
    from tempering.sandbox.request import Sandbox

HOME = "/root"  # a session's HOME, outside its workspace (Harbor's tasks run as root)
MIN_COMMAND_S = 0.01  # a budget with less than this left is spent

__all__ = ["ExecTag", "Session", "SessionDefaults", "SessionSpec", "SessionUsage"]


@dataclass(frozen=True)
class SessionSpec:
    """What an episode's sandbox session starts from and may use. `disk_mb` caps the workspace
    (and HOME); None is the sandbox's `disk_mb` (`[sandbox]`), filled in when the session
    opens, which checks the workspace against it then. `mounts` are more filesystems for every
    command: read-only ones from the host (a task's /solution), writable ones (fresh for each
    command, or kept across commands when `collect`, as /logs/agent). `layer` names a package
    layer every command sees read-only (`ExecRequest.layer`)."""

    workdir: str = DEFAULT_WORKDIR
    workspace: Workspace = field(default_factory=Workspace)
    env: Mapping[str, str] = field(default_factory=dict)
    disk_mb: int | None = None  # None: sandbox.disk_mb
    max_commands: int = 64
    cpu_s: float = 60.0  # CPU seconds of all its commands together
    wall_s: float = 300.0  # wall-clock seconds of all its commands together
    tag: ExecTag = field(default_factory=ExecTag)
    mounts: tuple[Mount, ...] = ()
    layer: str = ""

    def __post_init__(self) -> None:
        if self.max_commands < 0 or self.cpu_s < 0 or self.wall_s < 0:
            raise ValueError(f"SessionSpec budgets must be >= 0: max_commands={self.max_commands}, "
                             f"cpu_s={self.cpu_s}, wall_s={self.wall_s}")
        # The same checks a command's request makes, once, with the workspace at workdir.
        Mount(self.workdir, writable=True, size_mb=self.disk_mb)
        if self.disk_mb is not None and self.workspace.size > self.disk_mb << 20:
            raise ValueError(f"SessionSpec.workspace holds {self.workspace.size} bytes, over disk_mb={self.disk_mb}")


@dataclass(frozen=True)
class SessionDefaults:
    """What a backend gives every command of its sessions unless the command says otherwise:
    the limits of its `[sandbox]` config (`from_config`; no defaults of their own), so a
    session command's request, result and telemetry row carry the limits that applied."""

    time_limit_s: float
    memory_mb: int
    pids: int
    output_limit_bytes: int
    cpus: float  # the CPU bandwidth of one command: how fast it can spend the CPU budget
    disk_mb: int  # the workspace's (and HOME's) size when the spec leaves it None
    env: Mapping[str, str] = field(default_factory=dict)  # the toolchain's PATH, PYTHONPATH, ...
    home: Workspace | None = None  # HOME's starting content; None: HOME stays the workdir

    @classmethod
    def from_config(cls, cfg: "SandboxConfig", env: Mapping[str, str] | None = None,
                    home: Workspace | None = None) -> "SessionDefaults":
        return cls(time_limit_s=cfg.time_limit_s, memory_mb=cfg.memory_mb, pids=cfg.pids,
                   output_limit_bytes=cfg.output_limit_bytes, cpus=cfg.cpus, disk_mb=cfg.disk_mb, env=env or {},
                   home=home)


@dataclass(frozen=True)
class SessionUsage:
    commands: int = 0
    cpu_s: float = 0.0
    wall_s: float = 0.0


class Session:
    def __init__(self, sandbox: "Sandbox", spec: SessionSpec, defaults: SessionDefaults) -> None:
        """Raises ValueError when the spec leaves disk_mb to the sandbox and its workspace does
        not fit the sandbox's."""
        if spec.disk_mb is None:
            spec = dataclasses.replace(spec, disk_mb=defaults.disk_mb)  # __post_init__ checks it again
        self._sandbox, self.spec, self._defaults = sandbox, spec, defaults
        self._workspace = spec.workspace
        self._kept: dict[str, Workspace] = {m.path: m.content for m in spec.mounts if m.collect}
        # HOME is a filesystem of its own, unless the session's own paths lie on or around it.
        self._home = defaults.home is not None and not any(
            _overlap(p, HOME) for p in (spec.workdir, *(m.path for m in spec.mounts)))
        if self._home:
            self._kept[HOME] = defaults.home
        self._usage = SessionUsage()
        self._lock = threading.Lock()
        self._abort = Abort()
        self._closed = False

    def run(self, command: Sequence[str], *, stdin: bytes = b"", time_limit_s: float | None = None,
            memory_mb: int | None = None, env: Mapping[str, str] | None = None, turn: int = -1) -> ExecResult:
        """Run one command in the workspace (its working directory is `workdir`). Refused
        without running when the session is closed (`killed`) or its budgets are spent
        (`budget`). The workspace keeps what the command left, also when it timed out."""
        if isinstance(command, str) or not command:
            raise ValueError(f"Session.run: command must be a non-empty sequence of arguments, got {command!r}")
        with self._lock:
            if self._closed or self._abort.fired:
                return _refused(ExecReason.KILLED, "the session is closed")
            left = self._left()
            if isinstance(left, str):
                return _refused(ExecReason.BUDGET, left)
            request = self._request(command, stdin, min(time_limit_s or self._defaults.time_limit_s, left),
                                    memory_mb, env, turn)
            result = self._sandbox.run(request, abort=self._abort)
            self._usage = SessionUsage(self._usage.commands + 1, self._usage.cpu_s + result.cpu_s,
                                       self._usage.wall_s + result.wall_s)
            return self._keep(result)

    def _left(self) -> float | str:
        """The most seconds the next command may run, or why it may not run at all."""
        spec, used = self.spec, self._usage
        if used.commands >= spec.max_commands:
            return f"the session has run its max_commands={spec.max_commands} commands"
        if used.wall_s >= spec.wall_s:
            return f"the session has used its wall_s={spec.wall_s} seconds ({used.wall_s:.2f})"
        if used.cpu_s >= spec.cpu_s:
            return f"the session has used its cpu_s={spec.cpu_s} CPU seconds ({used.cpu_s:.2f})"
        left = min(spec.wall_s - used.wall_s, (spec.cpu_s - used.cpu_s) / self._defaults.cpus)
        if left < MIN_COMMAND_S:  # what is left could not even start a command
            return f"the session has {left:.3f} s of its wall_s={spec.wall_s} / cpu_s={spec.cpu_s} left"
        return left

    def _request(self, command: Sequence[str], stdin: bytes, limit: float, memory_mb: int | None,
                 env: Mapping[str, str] | None, turn: int) -> ExecRequest:
        spec, d = self.spec, self._defaults
        mounts = [Mount(spec.workdir, self._workspace, writable=True, collect=True, size_mb=spec.disk_mb)]
        for m in spec.mounts:
            mounts.append(dataclasses.replace(m, content=self._kept[m.path]) if m.collect else m)
        base_env = dict(d.env)
        if self._home:
            mounts.append(Mount(HOME, self._kept[HOME], writable=True, collect=True, size_mb=spec.disk_mb))
            base_env["HOME"] = HOME
        # The job holds each archive three times over (as sent, unpacked, packed back): a command's
        # memory limit is raised to that, or a grown workspace would make it fail to start.
        packed = sum(len(m.content.archive) for m in mounts)
        memory = max(memory_mb or d.memory_mb, (3 * packed >> 20) + 32)
        return ExecRequest(command=tuple(command), stdin=stdin, env=_environment(base_env, spec.env, env or {}),
                           time_limit_s=limit, memory_mb=memory, pids=d.pids,
                           output_limit_bytes=d.output_limit_bytes, workdir=spec.workdir, mounts=tuple(mounts),
                           tag=dataclasses.replace(spec.tag, turn=turn), layer=spec.layer)

    def _keep(self, result: ExecResult) -> ExecResult:
        """Take the archives the command left as the session's state; return the result
        without them (they can be megabytes, and the caller has `workspace`)."""
        problems = [result.error] if result.error and result.reason != ExecReason.SANDBOX_ERROR else []
        for path, data in result.archives.items():
            try:
                ws = Workspace(data)
            except ValueError as e:  # the guest packed it: a bad archive is the sandbox's fault
                problems.append(f"{path} came back malformed and was not kept: {e}")
                continue
            if path == self.spec.workdir:
                self._workspace = ws
            elif path in self._kept:
                self._kept[path] = ws
        if result.reason != ExecReason.SANDBOX_ERROR and self.spec.workdir not in result.archives:
            problems.append("the workspace was not kept (the command's changes are lost)")
        return dataclasses.replace(result, archives={}, error="; ".join(dict.fromkeys(problems)) or result.error)

    def read_file(self, path: str) -> bytes | None:
        """A regular file of the workspace (workdir-relative, or absolute under workdir), read on
        the host; None when absent or not a regular file."""
        return self._workspace.read(self._relative(path))

    def write_file(self, path: str, data: bytes, mode: int = 0o644) -> None:
        """Write a file into the workspace on the host; the next command sees it."""
        with self._lock:
            if self._closed:
                raise ValueError("Session.write_file: the session is closed")
            self._workspace = self._workspace.write(self._relative(path), data, mode)

    def _relative(self, path: str) -> str:
        prefix = self.spec.workdir.rstrip("/") + "/"
        return path[len(prefix):] if path.startswith(prefix) else path

    @property
    def workspace(self) -> Workspace:
        return self._workspace

    def final_state(self) -> Workspace:
        """What the verifier judges: the workspace as the episode left it."""
        return self._workspace

    @property
    def workdir(self) -> str:
        """Where the workspace appears to the session's commands."""
        return self.spec.workdir

    def collected(self, path: str) -> Workspace:
        """What a mount kept across commands holds now (a spec mount with `collect`, or HOME)."""
        if path not in self._kept:
            raise ValueError(f"Session.collected: {path!r} is not kept across commands (kept: {sorted(self._kept)})")
        return self._kept[path]

    @property
    def usage(self) -> SessionUsage:
        return self._usage

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """End a command in progress (killed) and refuse later ones. Returns once no command of
        this session is running. Safe to call twice and from any thread."""
        self._abort.fire()
        with self._lock:
            if not self._closed:
                self._closed = True
                self._abort.close()

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _environment(base: Mapping[str, str], *over: Mapping[str, str]) -> dict[str, str]:
    """`base` (the sandbox's: the toolchain's PATH and PYTHONPATH) updated by each of `over`,
    except that a PATH or PYTHONPATH set there keeps the sandbox's entries after its own, as a
    Docker image's PATH and site-packages stay on a task's ENV PATH=/x:$PATH (which the
    Dockerfile's interpreter cannot expand to ours)."""
    out = dict(base)
    for env in over:
        for key, value in env.items():
            if key in ("PATH", "PYTHONPATH") and key in base:
                own = [p for p in value.split(":") if p]
                value = ":".join(dict.fromkeys(own + base[key].split(":")))
            out[key] = value
    return out


def _overlap(p: str, q: str) -> bool:
    return p == q or p.startswith(q + "/") or q.startswith(p + "/")


def _refused(reason: ExecReason, why: str) -> ExecResult:
    return ExecResult(reason=reason, exit_code=None, error=why)
