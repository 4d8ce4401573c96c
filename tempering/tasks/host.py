"""The per-episode host contract: what a domain's tools act on, and what a tool is.

`ToolHost` is where an episode's tools act: a sandbox session, a `WorkspaceHost` (files with no
sandbox behind them), or a domain's own object (a 3D scene, a document: `Domain.open_host`).
`Tool` and `Param` describe a tool the model may call; `ToolError` is a call the tool could not
carry out (its message becomes the model's observation). This module sits beside the domain
contract (`tasks.domain`) so that domains define their tools without importing the agent loop
or the rollout; the common tools and carrying out a call are `tempering.agent.tools`'.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Protocol

from tempering.records import Budget, ExecResult
from tempering.sandbox_paths import WORKSPACE


class ToolHost(Protocol):
    """Where tools act: a sandbox session, a workspace with no sandbox behind it, or a domain's
    own object (whose tools need not read or write files). `final_state` is what the domain's
    verifier receives once the episode ended: a session's workspace, or the host itself."""

    workdir: str

    def read_file(self, path: str) -> bytes | None: ...

    def write_file(self, path: str, data: bytes) -> None: ...

    def run(self, command: tuple[str, ...], *, time_limit_s: float | None, memory_mb: int | None,
            turn: int) -> ExecResult: ...  # a limit None: the sandbox's configured default

    def final_state(self) -> object: ...  # what the verifier judges (`VerifierContext.workspace`)


class WorkspaceHost:
    """An episode's files with no sandbox behind them: `read`, `write` and `edit` work, `run`
    is refused. For domains whose tools only read and write (no code runs, no sandbox starts)."""

    def __init__(self, files: Mapping[str, bytes], workdir: str = WORKSPACE):
        self.files, self.workdir = dict(files), workdir

    def read_file(self, path: str) -> bytes | None:
        return self.files.get(path)

    def write_file(self, path: str, data: bytes) -> None:
        self.files[path] = data

    def run(self, command: tuple[str, ...], *, time_limit_s: float | None, memory_mb: int | None,
            turn: int) -> ExecResult:
        raise ToolError("this task has no sandbox: commands cannot run")

    def final_state(self) -> WorkspaceHost:
        return self


@dataclass(frozen=True)
class Param:
    name: str
    description: str


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    params: tuple[Param, ...]
    call: Callable[[dict[str, str], ToolHost, Budget, int], tuple[str, ExecResult | None]]
    ends_episode: bool = False


class ToolError(Exception):
    """A call the tool could not carry out; its message is the model's observation."""
