"""The catalog of terminal coding tasks: hand-written Harbor folders and generated bug-fix tasks.

    from tempering.tasks import terminal
    terminal.names()                      # every task name, hand-written first
    terminal.get("fix-median-even")       # TaskInfo: difficulty, category, tags, needs, origin
    terminal.materialize(name, "/tmp/x")  # -> Path("/tmp/x/<name>"), a complete Harbor folder

Hand-written tasks are stored as real folders in `tasks/<name>/`; generated ones are built on
demand from a shipped library copy plus one line of `mutations.jsonl` (see generated.py).
"""

from __future__ import annotations

import functools
import shutil
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from tempering.tasks.terminal import generated, templates

HERE = Path(__file__).resolve().parent
HAND_WRITTEN_DIR = HERE / "tasks"
HAND_WRITTEN = "hand-written"
GENERATED = "generated"


@dataclass(frozen=True)
class TaskInfo:
    """One task's metadata. `commands` and `python_packages` are what it needs from the sandbox's
    toolchain (task.toml's [tempering] table); `origin`, for generated tasks, records the library,
    version, licence, mutated file and line, and the failing tests."""

    name: str
    kind: str  # HAND_WRITTEN or GENERATED
    title: str
    difficulty: str
    category: str
    tags: tuple[str, ...]
    commands: tuple[str, ...]
    python_packages: tuple[str, ...]
    verifier_timeout_sec: float
    agent_timeout_sec: float
    origin: dict | None = field(default=None, compare=False)


def _title(instruction: str) -> str:
    for line in instruction.splitlines():
        if line.strip():
            return line.lstrip("# ").strip()
    return ""


def _info_from_toml(name: str, kind: str, toml: dict, instruction: str) -> TaskInfo:
    meta = toml.get("metadata", {})
    needs = toml.get("tempering", {})
    return TaskInfo(
        name=name, kind=kind, title=_title(instruction),
        difficulty=meta.get("difficulty", "medium"), category=meta.get("category", ""),
        tags=tuple(meta.get("tags", ())),
        commands=tuple(needs.get("commands", templates.BASE_COMMANDS)),
        python_packages=tuple(needs.get("python_packages", templates.BASE_PYTHON_PACKAGES)),
        verifier_timeout_sec=float(toml.get("verifier", {}).get("timeout_sec", 60.0)),
        agent_timeout_sec=float(toml.get("agent", {}).get("timeout_sec", 900.0)),
        origin=meta.get("origin"),
    )


@functools.cache
def _catalog() -> dict[str, TaskInfo]:
    out: dict[str, TaskInfo] = {}
    if HAND_WRITTEN_DIR.is_dir():
        for d in sorted(HAND_WRITTEN_DIR.iterdir()):
            if (d / "task.toml").is_file():
                toml = tomllib.loads((d / "task.toml").read_text(encoding="utf-8"))
                out[d.name] = _info_from_toml(d.name, HAND_WRITTEN, toml,
                                              (d / "instruction.md").read_text(encoding="utf-8"))
    for name, r in generated.records().items():
        toml = tomllib.loads(generated.task_toml(r))
        out[name] = _info_from_toml(name, GENERATED, toml, f"Fix the bug in {r['library']} {r['version']}")
    return out


def tasks(kind: str | None = None) -> list[TaskInfo]:
    """Every task (or those of one kind), hand-written first, each group in name order."""
    return [t for t in _catalog().values() if kind is None or t.kind == kind]


def names(kind: str | None = None) -> list[str]:
    return [t.name for t in tasks(kind)]


def get(name: str) -> TaskInfo:
    try:
        return _catalog()[name]
    except KeyError:
        raise KeyError(f"no terminal task named {name!r} ({len(_catalog())} tasks; "
                       "see tempering.tasks.terminal.names())") from None


def materialize(name: str, dest_dir: str | Path, *, overwrite: bool = False) -> Path:
    """Write task `name` as a Harbor folder `dest_dir/name` and return its path. An existing
    folder of that name is an error unless `overwrite`."""
    info = get(name)
    dest = Path(dest_dir) / name
    if dest.exists():
        if not overwrite:
            raise FileExistsError(f"{dest} exists (pass overwrite=True to replace it)")
        shutil.rmtree(dest)
    Path(dest_dir).mkdir(parents=True, exist_ok=True)
    if info.kind == HAND_WRITTEN:
        shutil.copytree(HAND_WRITTEN_DIR / name, dest,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    else:
        generated.materialize(name, dest)
    return dest


def libraries() -> list[dict]:
    """The shipped library copies: name, version, licence, licence file, sdist and its sha256,
    and how many generated tasks each has."""
    counts: dict[str, int] = {}
    for r in generated.records().values():
        counts[r["library"]] = counts.get(r["library"], 0) + 1
    out = []
    for name in counts:
        meta = dict(generated.library(name))
        meta["tasks"] = counts[name]
        out.append(meta)
    return out
