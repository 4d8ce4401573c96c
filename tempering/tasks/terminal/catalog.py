"""The catalog of terminal coding tasks: hand-written Harbor folders and generated bug-fix tasks.

    from tempering.tasks import terminal
    terminal.names()                      # every task name, hand-written first
    terminal.get("fix-median-even")       # TaskInfo: difficulty, category, tags, needs, origin
    terminal.materialize(name, "/tmp/x")  # -> Path("/tmp/x/<name>"), a complete Harbor folder
    terminal.folder(name)                 # the task's folder where it lives (data or cache)

Hand-written tasks are real folders in the data folder's `tasks/<name>/` (`data`); generated
ones are one line of its `mutations.jsonl` each, built from an upstream library fetched into the
cache at set-up (see generated.py). Until that is done (offline with a cold cache, say), the
generated tasks are left out of the catalog, and one line on stderr says so and how to build them.
"""

from __future__ import annotations

import functools
import shutil
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from tempering.tasks.terminal import data, generated, templates, upstream

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
    for d in sorted(data.hand_written_dir().iterdir()):
        if (d / "task.toml").is_file():
            toml = tomllib.loads((d / "task.toml").read_text(encoding="utf-8"))
            out[d.name] = _info_from_toml(d.name, HAND_WRITTEN, toml,
                                          (d / "instruction.md").read_text(encoding="utf-8"))
    if not generated.built():
        print(f"[tempering] terminal: the {len(generated.records())} generated tasks are left out: their upstream "
              f"libraries are not in the cache ({upstream.root()}); build them with scripts/setup.sh or "
              "`python -m tempering.tasks.terminal build` (PyPI is needed once)", file=sys.stderr, flush=True)
        return out
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
        shutil.copytree(data.hand_written_dir() / name, dest,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    else:
        generated.materialize(name, dest)
    return dest


def folder(name: str) -> Path:
    """Task `name`'s Harbor folder where it lives: the data folder's for a hand-written task,
    the cache's for a generated one (materialised there on first use). Read it, never edit it."""
    return data.hand_written_dir() / name if get(name).kind == HAND_WRITTEN else generated.folder(name)


def libraries() -> list[dict]:
    """The upstream libraries in the cache: name, version, licence (as the package records it),
    licence file, sdist and its sha256, and how many generated tasks each has."""
    counts: dict[str, int] = {}
    for r in generated.records().values():
        counts[r["library"]] = counts.get(r["library"], 0) + 1
    out = []
    for name in counts:
        meta = dict(generated.library(name))
        meta["tasks"] = counts[name]
        out.append(meta)
    return out
