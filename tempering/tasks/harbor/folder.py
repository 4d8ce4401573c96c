"""One Harbor / Terminal-Bench 2 task folder, read into a `HarborTask`.

The layout: `instruction.md` (the prompt), `task.toml` (timeouts and resources; tomllib),
`environment/Dockerfile` with its build context (interpreted: `dockerfile`), `tests/test.sh`
and the files beside it (the hidden tests, kept as a pristine archive), and optionally
`solution/solve.sh` (the oracle). A task may say what it needs from the toolchain in
task.toml's `[tempering]` table (`commands`, `python_packages`, `apt_packages`); what its
scripts install is added: the Dockerfile's RUN lines and solve.sh set the environment up
(`setup_needs`), test.sh the verifier's (`test_needs`). `load` reads and checks all of it
and raises `Unrunnable` naming the file and what is wrong; it runs nothing. `Limits` are the
runner's caps on what a task.toml may ask for (timeouts, memory) and the sizes it gives
(workspace, logs). `HarborTask.session_spec` is what an episode's sandbox session starts from.
"""

from __future__ import annotations

import functools
import math
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from tempering.sandbox.request import ExecTag, Mount
from tempering.sandbox.session import SessionSpec
from tempering.sandbox.workspace import Workspace
from tempering.tasks.harbor import dockerfile, needs
from tempering.tasks.harbor.dockerfile import Environment

TESTS, SOLUTION, AGENT_LOGS, VERIFIER_LOGS = "/tests", "/solution", "/logs/agent", "/logs/verifier"


class Unrunnable(ValueError):
    """A task folder this runner cannot run (malformed, unsupported, or its needs unmet);
    `str()` is the one-line reason, naming the folder."""


@dataclass(frozen=True)
class Limits:
    """The runner's caps on a task's own settings, and the sizes it gives its filesystems. A
    command's process and output limits are not here: task.toml has no such settings, so its
    commands get `[sandbox]`'s `pids` and `output_limit_bytes`, as every session command does."""

    # The task's own timeouts apply up to these (Terminal-Bench 2's reach 3,600 s for the agent
    # and 12,000 s for one verifier); its memory up to memory_mb (its tasks ask 2-8 GB).
    verifier_s: float = 14400.0  # the most test.sh may run, whatever task.toml asks
    agent_s: float = 14400.0  # the most a solution script (the oracle) may run
    build_s: float = 14400.0  # the most all RUN lines together may run
    memory_mb: int = 8192
    disk_mb: int = 256  # the workspace (a tmpfs: it counts as memory)
    logs_mb: int = 16  # /logs/verifier and /logs/agent


@dataclass(frozen=True)
class TaskConfig:
    """What task.toml says (Harbor's defaults where it is silent)."""

    verifier_timeout_s: float = 600.0
    agent_timeout_s: float = 600.0
    build_timeout_s: float = 600.0
    memory_mb: int = 2048
    cpus: float = 1.0
    storage_mb: int | None = None  # the workspace's size, when task.toml says (capped by Limits.disk_mb)
    verifier_env: Mapping[str, str] = field(default_factory=dict)
    metadata: Mapping[str, object] = field(default_factory=dict)  # TOML values
    needs: needs.Needs = field(default_factory=needs.Needs)  # the [tempering] table


@dataclass(frozen=True)
class HarborTask:
    path: Path
    id: str  # the folder's name
    instruction: str
    config: TaskConfig
    environment: Environment
    tests: Workspace  # tests/, pristine: what /tests holds at verification
    solution: Workspace | None  # solution/, when the folder has solve.sh
    needs: needs.Needs  # all of them: setup_needs | test_needs
    setup_needs: needs.Needs = field(default_factory=needs.Needs)  # [tempering], RUN lines and solve.sh
    test_needs: needs.Needs = field(default_factory=needs.Needs)  # test.sh

    @property
    def workdir(self) -> str:
        return self.environment.workdir

    def session_spec(self, workspace: Workspace, tag: ExecTag = ExecTag(), limits: Limits = Limits(),
                     mounts: tuple[Mount, ...] = (), wall_s: float | None = None, max_commands: int = 64,
                     layer: str = "") -> SessionSpec:
        """An episode's session on `workspace` (the built environment, `build`): at WORKDIR,
        with the Dockerfile's ENV, the folders its COPY lines fill outside WORKDIR (fresh from
        the Dockerfile in each session, kept across its commands), a /logs/agent kept across
        commands, `mounts` (e.g. /solution for the oracle) and the package `layer` ("": none).
        Budgets: the task's agent timeout (capped) unless `wall_s`."""
        wall = wall_s if wall_s is not None else min(self.config.agent_timeout_s, limits.agent_s)
        logs = Mount(AGENT_LOGS, writable=True, collect=True, size_mb=limits.logs_mb)
        disk = min(self.config.storage_mb or limits.disk_mb, limits.disk_mb)
        outside = tuple(Mount(path, content, writable=True, collect=True, size_mb=_fitting(content, disk))
                        for path, content in self.environment.outside.items())
        return SessionSpec(workdir=self.workdir, workspace=workspace, env=dict(self.environment.env),
                           disk_mb=_fitting(workspace, disk), max_commands=max_commands,
                           cpu_s=wall * self.config.cpus, wall_s=wall, tag=tag, mounts=(logs, *outside, *mounts),
                           layer=layer)


def _fitting(content: Workspace, disk_mb: int) -> int:
    """A filesystem of `disk_mb` megabytes, or more when `content` would not fit in it."""
    return max(disk_mb, -(-content.size // (1 << 20)) + 1)


def read_only(path: str, content: Workspace) -> Mount:
    """A read-only filesystem holding `content` (the tests, a solution), sized to fit it."""
    return Mount(path, content, size_mb=max(16, 2 * (content.size >> 20) + 16))


def load(path: str | Path) -> HarborTask:
    """Read the task folder at `path`. Raises Unrunnable naming what is missing or refused."""
    root = Path(path)
    if not root.is_dir():
        raise Unrunnable(f"{root}: not a directory")
    for needed in ("instruction.md", "environment/Dockerfile", "tests/test.sh"):
        if not (root / needed).is_file():
            raise Unrunnable(f"{root}: no {needed} (not a Harbor task folder)")
    config = _config(root / "task.toml")
    try:
        env = dockerfile.interpret((root / "environment/Dockerfile").read_text(), root / "environment")
        tests = Workspace.from_dir(root / "tests")
        solution = Workspace.from_dir(root / "solution") if (root / "solution/solve.sh").is_file() else None
    except (ValueError, OSError, UnicodeDecodeError) as e:  # dockerfile.Unsupported is a ValueError
        raise Unrunnable(f"{root}: {e}") from None
    setup = [step.text for step in env.steps if isinstance(step, dockerfile.Run)]
    if solution is not None:
        setup.append((solution.read("solve.sh") or b"").decode(errors="replace"))
    setup_needs = config.needs
    for text in setup:
        setup_needs = setup_needs | needs.find(text)
    test_needs = needs.find((root / "tests/test.sh").read_text(errors="replace"))
    return HarborTask(root, root.name, (root / "instruction.md").read_text(errors="replace"), config, env,
                      tests, solution, setup_needs | test_needs, setup_needs, test_needs)


@functools.lru_cache(maxsize=256)
def _load_resolved(path: str) -> HarborTask:
    return load(path)


def load_cached(path: str | Path) -> HarborTask:
    """`load`, remembered for the process's life (a folder is read once however many episodes
    and verifications use it; a folder edited meanwhile is not read again)."""
    return _load_resolved(str(Path(path).resolve()))


def _config(path: Path) -> TaskConfig:
    if not path.is_file():
        return TaskConfig()
    try:
        doc = tomllib.loads(path.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise Unrunnable(f"{path}: not valid TOML: {e}") from None
    verifier, agent, env, ours = (_table(doc, path, name) for name in ("verifier", "agent", "environment", "tempering"))
    memory = env.get("memory_mb", env.get("memory", TaskConfig.memory_mb))
    storage = env.get("storage_mb", env.get("storage"))
    return TaskConfig(
        storage_mb=None if storage is None else _megabytes(storage, path, "environment.storage"),
        needs=needs.Needs(*(_strings(ours, key, path) for key in ("python_packages", "apt_packages", "commands"))),
        verifier_timeout_s=_seconds(verifier, "timeout_sec", TaskConfig.verifier_timeout_s, path, "verifier"),
        agent_timeout_s=_seconds(agent, "timeout_sec", TaskConfig.agent_timeout_s, path, "agent"),
        build_timeout_s=_seconds(env, "build_timeout_sec", TaskConfig.build_timeout_s, path, "environment"),
        memory_mb=_megabytes(memory, path, "environment.memory"),
        cpus=_seconds(env, "cpus", TaskConfig.cpus, path, "environment"),
        verifier_env={str(k): str(v) for k, v in _table(verifier, path, "verifier.env", "env").items()},
        metadata=_table(doc, path, "metadata"))


def _table(doc: dict, path: Path, name: str, key: str | None = None) -> dict:
    value = doc.get(key or name, {})
    if not isinstance(value, dict):
        raise Unrunnable(f"{path}: [{name}] must be a table, got {value!r}")
    return value


def _seconds(table: dict, key: str, default: float, path: Path, section: str) -> float:
    value = table.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise Unrunnable(f"{path}: {section}.{key} must be a positive number, got {value!r}")
    return float(value)


def _strings(table: dict, key: str, path: Path) -> tuple[str, ...]:
    value = table.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise Unrunnable(f"{path}: tempering.{key} must be a list of strings, got {value!r}")
    return tuple(value)


def _megabytes(value: object, path: Path, key: str) -> int:
    """2048, "2G", "512M", "2GB" -> megabytes."""
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)i?B?\s*", str(value), re.I)
    if not m:
        raise Unrunnable(f"{path}: {key} must be megabytes or a size such as '2G', got {value!r}")
    scale = {"": 1 / (1 << 20), "K": 1 / 1024, "M": 1, "G": 1024, "T": 1 << 20}[m.group(2).upper()]
    return max(1, int(float(m.group(1)) * scale))
