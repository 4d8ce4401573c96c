"""What a sandbox is asked to run (`ExecRequest`), what every backend provides (`Sandbox`) and
how every backend reads the exit status of a program that ended by itself (`exit_reason`)."""

from __future__ import annotations

import signal
from dataclasses import dataclass, field
from typing import Mapping, Protocol

from tempering.records import ExecReason, ExecResult
from tempering.sandbox.guest.collect import check_name


@dataclass(frozen=True)
class ExecRequest:
    """One program run. `files` are written into a fresh workspace (the working directory);
    files named in `collect` (workspace-relative) are read back after the run. Limits: wall
    clock (`time_limit_s`), memory including the job's tmpfs files (`memory_mb`), processes and
    threads (`pids`), and stdout plus stderr together (`output_limit_bytes`)."""

    command: tuple[str, ...]
    files: Mapping[str, bytes] = field(default_factory=dict)
    stdin: bytes = b""
    env: Mapping[str, str] = field(default_factory=dict)
    time_limit_s: float = 5.0
    memory_mb: int = 256
    pids: int = 64
    output_limit_bytes: int = 65536
    collect: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.command:
            raise ValueError("ExecRequest.command must name a program")
        if self.time_limit_s <= 0 or self.memory_mb <= 0 or self.output_limit_bytes <= 0:
            raise ValueError(f"ExecRequest limits must be positive: {self}")
        if self.pids <= 0:
            raise ValueError(f"ExecRequest.pids must be positive: {self.pids}")
        # The job's init holds the files (encoded and decoded) while writing them into the
        # job's tmpfs, all inside the job's memory limit.
        size = sum(len(data) for data in self.files.values())
        if size * 4 > self.memory_mb << 20:
            raise ValueError(f"ExecRequest.files hold {size} bytes: more than a quarter of memory_mb={self.memory_mb}")
        for name in (*self.files, *self.collect):
            try:
                check_name(name)  # the same check the guest makes before writing or reading a file
            except ValueError:
                raise ValueError(f"ExecRequest file name {name!r} must be a plain path inside the workspace") from None
        for key, value in self.env.items():
            if not key or "=" in key or "\0" in key or "\0" in value:
                raise ValueError(f"ExecRequest.env entry {key!r} is not a valid environment variable")


class Sandbox(Protocol):
    """A backend. `run` may be called from many threads at once and never raises for what the
    program does or for its own failures (those are `reason=sandbox_error`); `close` ends it."""

    name: str

    def run(self, request: ExecRequest) -> ExecResult: ...

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
