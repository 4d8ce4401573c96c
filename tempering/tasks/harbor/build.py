"""Setting a task's environment up: the starting workspace its Dockerfile describes.

`build` applies the Dockerfile's steps in order: COPY on the host (`Workspace`), RUN as a
command of a sandbox session on the workspace so far (offline, confined like any command,
with the Dockerfile's ENV and ARG values, HOME outside the workspace, the toolchain's
installer shims on PATH and the task's environment package layer, built first: `packages`).
All RUN lines together get the task's build timeout (capped by `Limits.build_s`). A RUN that
fails (no network, a package the toolchain lacks) makes the task `Unrunnable`, with the line
and the tail of its output; so does a sandbox failure, marked as one, and a layer that
cannot be built. `setup_session_spec` is the session an episode starts from. It keeps nothing
but the resulting workspace: effects outside WORKDIR are lost (the folders COPY fills there
come fresh from the Dockerfile in every session), as the session's own commands lose them.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

from tempering.records import ExecReason
from tempering.sandbox.request import ExecTag, Sandbox
from tempering.sandbox.session import SessionSpec
from tempering.sandbox.workspace import Workspace
from tempering.tasks.harbor import packages
from tempering.tasks.harbor.dockerfile import Copy, Run
from tempering.tasks.harbor.folder import HarborTask, Limits, Unrunnable, load_cached

_TAIL = 400  # characters of a failed RUN's output quoted in the reason


class SetupFailed(Unrunnable):
    """A RUN line failed; `infrastructure` when the sandbox itself failed (not the task's fault)."""

    def __init__(self, message: str, infrastructure: bool = False) -> None:
        super().__init__(message)
        self.infrastructure = infrastructure


def build(task: HarborTask, sandbox: Sandbox, limits: Limits = Limits(), tag: ExecTag = ExecTag()) -> Workspace:
    """The workspace at WORKDIR once every step of the Dockerfile has run."""
    ws = Workspace()
    layer = packages.layers(task, sandbox.toolchain, sandbox).environment_name
    deadline = time.monotonic() + min(task.config.build_timeout_s, limits.build_s)
    for step in task.environment.steps:
        if isinstance(step, Copy):
            try:
                ws = step.apply(ws)
            except ValueError as e:
                raise Unrunnable(f"{task.path}: Dockerfile line {step.line} (COPY): {e}") from None
            continue
        ws = _run(task, sandbox, ws, step, deadline - time.monotonic(), limits, tag, layer)
    if ws.size > limits.disk_mb << 20:
        raise Unrunnable(f"{task.path}: the environment holds {ws.size} bytes, over the {limits.disk_mb} MB workspace")
    return ws


def setup_session_spec(folder: str | Path, sandbox: Sandbox, limits: Limits = Limits(),
                       tag: ExecTag = ExecTag()) -> SessionSpec:
    """What an episode of the task at `folder` starts from: its environment built now (RUN
    lines run in `sandbox`), as `HarborTask.session_spec`. Raises Unrunnable."""
    task = load_cached(folder)
    found = packages.layers(task, sandbox.toolchain, sandbox)  # the verifier's too: refused now if it cannot be
    return task.session_spec(build(task, sandbox, limits, tag), tag, limits, layer=found.environment_name)


def _run(task: HarborTask, sandbox: Sandbox, ws: Workspace, step: Run, left_s: float, limits: Limits,
         tag: ExecTag, layer: str) -> Workspace:
    where = f"{task.path}: Dockerfile line {step.line} (RUN {_short(step.text)})"
    if left_s <= 0:
        raise Unrunnable(f"{task.path}: the build timeout of {task.config.build_timeout_s} s is spent before "
                         f"Dockerfile line {step.line}")
    spec = task.session_spec(ws, tag, limits, wall_s=left_s, max_commands=1, layer=layer)
    spec = dataclasses.replace(spec, env=dict(step.env))
    with sandbox.open_session(spec) as session:
        r = session.run(step.command, time_limit_s=left_s, memory_mb=min(task.config.memory_mb, limits.memory_mb))
        if r.reason == ExecReason.SANDBOX_ERROR:
            raise SetupFailed(f"{where}: the sandbox failed: {r.error}", infrastructure=True)
        if not r.ok:
            output = (r.stdout + r.stderr).strip()[-_TAIL:].replace("\n", " | ")
            why = "timed out" if r.reason == ExecReason.TIMEOUT else f"failed ({r.reason.value}, exit {r.exit_code})"
            raise SetupFailed(f"{where} {why}: {output or 'no output'}")
        return session.workspace


def _short(text: str, limit: int = 60) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 3] + "..."
