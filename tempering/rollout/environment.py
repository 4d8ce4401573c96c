"""Opening and closing the workspaces that a task's episodes act on.

A task without tools has none. A domain whose tools act on an object of its own (a scene, a
document) opens one per episode (`Domain.open_host`). A task whose tools only read and write
files gets a `WorkspaceHost` per episode (its files in memory; no sandbox, none started for
it). A task that
runs commands gets a sandbox session per episode, all starting from the same workspace; a
Harbor-format task folder's environment is set up once (its Dockerfile interpreted, RUN lines
executed in the sandbox) and reused for every later group of that task. Sessions are tagged with
the sample they serve, so every sandbox execution can be joined to its sample.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict

from tempering.records import Task
from tempering.rollout.group_key import GroupKey
from tempering.sandbox import Sandbox, SessionSpec, Workspace
from tempering.sandbox_paths import WORKSPACE
from tempering.tasks import get_domain
from tempering.tasks.host import ToolHost, WorkspaceHost

_SETUP_CACHE = 64  # Harbor environments kept set up (their workspaces are small archives)


class Environments:
    def __init__(self, sandbox: Sandbox | None):
        self.sandbox = sandbox
        self._setups: OrderedDict[str, SessionSpec] = OrderedDict()

    def open(self, task: Task, n: int, key: GroupKey, tenant: str = "") -> list[ToolHost] | None:
        """The workspaces of `n` episodes of `task` (None: it has no tools); `tenant` tags a
        served agent run's sessions, whose commands the node orders by it."""
        env = task.environment
        if not task.tools:
            return None
        domain = get_domain(task.domain)
        if domain.open_host is not None:  # its tools act on an object of its own (a 3D scene, a document)
            return [domain.open_host(task) for _ in range(n)]
        if "run" not in task.tools and (env is None or not env.folder):
            files = {name: text.encode() for name, text in (env.files if env else ())}
            return [WorkspaceHost(files, env.workdir if env else WORKSPACE) for _ in range(n)]
        if self.sandbox is None:
            raise RuntimeError(f"task {task.id} runs commands but no sandbox was started (its domain must say "
                               "sandbox=True)")
        if env is not None and env.folder:
            spec = self._harbor(env.folder)
        else:
            files = {name: text.encode() for name, text in (env.files if env else ())}
            spec = SessionSpec(workdir=env.workdir if env else WORKSPACE, workspace=Workspace.from_files(files))
        b = task.budget
        return [self.sandbox.open_session(dataclasses.replace(
                    spec, cpu_s=b.cpu_s, wall_s=b.wall_s, max_commands=8 * b.max_turns,
                    tag=key.tag(task, i, tenant)))
                for i in range(n)]

    def close(self, host: ToolHost) -> None:
        close = getattr(host, "close", None)
        if close is not None:
            close()

    def _harbor(self, folder: str) -> SessionSpec:
        if folder not in self._setups:
            from tempering.tasks.harbor import setup_session_spec

            self._setups[folder] = setup_session_spec(folder, self.sandbox)
            while len(self._setups) > _SETUP_CACHE:
                self._setups.popitem(last=False)
        self._setups.move_to_end(folder)
        return self._setups[folder]

