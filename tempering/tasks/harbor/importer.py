"""Importing task folders: every Harbor-format folder under some paths, checked as far as asked,
each either runnable or skipped with the reason.

`find_folders` walks the paths for task folders (a directory with instruction.md and
tests/test.sh; it does not look inside one). `scan` checks each: it loads (folder and
Dockerfile), compares its Debian packages and commands with the toolchain, and, given a
sandbox, builds its package layers (`packages`: from PyPI, once; without a sandbox it only
says which are not built yet) and its environment (RUN lines run offline: one that needs the
network fails here), runs the oracle (which must score 1) and a no-op (which must score 0,
or the tests do not test the work). A folder is runnable when every check asked for passed;
a skipped one says why in one line, every cause it found up front; a runnable one whose oracle
needed its processes alive through the tests (`services`) says so. The `terminal` domain can
take its tasks from the runnable ones; `tempering tasks import` prints them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

from tempering.sandbox.request import Sandbox
from tempering.sandbox.toolchain import Toolchain
from tempering.tasks.harbor import packages
from tempering.tasks.harbor.build import SetupFailed, build
from tempering.tasks.harbor.folder import HarborTask, Limits, Unrunnable, load
from tempering.tasks.harbor.trial import NOOP, check_needs, run_trial


@dataclass(frozen=True)
class Scan:
    path: Path
    task: HarborTask | None  # None when the folder could not be read
    runnable: bool
    reason: str  # why it is skipped; for a runnable one, what was checked
    oracle: float | None = None  # the oracle's reward, when run
    noop: float | None = None  # a no-op's reward, when run
    failed: bool = False  # skipped because the sandbox failed, not the task: worth a retry

    def to_json(self) -> dict:
        t = self.task
        return {"path": str(self.path), "task": t.id if t else self.path.name, "runnable": self.runnable,
                "reason": self.reason, "oracle": self.oracle, "noop": self.noop, "failed": self.failed,
                "workdir": t.workdir if t else None,
                "needs": {"python": list(t.needs.python), "uvx": list(t.needs.isolated), "apt": list(t.needs.apt),
                          "commands": list(t.needs.commands)} if t else None}


def find_folders(roots: Iterable[str | Path]) -> list[Path]:
    """Task folders at or under `roots`, sorted; ValueError for a root that does not exist."""
    found = []
    for root in map(Path, roots):
        if not root.exists():
            raise ValueError(f"{root}: no such file or directory")
        for dirpath, dirnames, _ in os.walk(root):
            here = Path(dirpath)
            if (here / "instruction.md").is_file() and (here / "tests" / "test.sh").is_file():
                found.append(here)
                dirnames.clear()  # a task's own folders hold no tasks
            else:
                dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
    return sorted(dict.fromkeys(found))


def scan(roots: Iterable[str | Path], toolchain: Toolchain | None, sandbox: Sandbox | None = None,
         oracle: bool = False, noop: bool = False, limits: Limits = Limits()) -> Iterator[Scan]:
    """Check every task folder under `roots`: loaded and needs met always; with a sandbox, its
    environment built, and the oracle and a no-op run when asked."""
    for path in find_folders(roots):
        yield check(path, toolchain, sandbox, oracle, noop, limits)


def check(path: Path, toolchain: Toolchain | None, sandbox: Sandbox | None = None, oracle: bool = False,
          noop: bool = False, limits: Limits = Limits()) -> Scan:
    try:
        task = load(path)
    except Unrunnable as e:
        return Scan(path, None, False, str(e))
    missing = check_needs(task, toolchain)
    try:  # a task skipped for what the toolchain lacks is not worth a download: its layers are only planned
        found = packages.layers(task, toolchain, sandbox, build_them=sandbox is not None and not missing)
    except Unrunnable as e:
        return Scan(path, task, False, str(e))
    unbuilt = ", ".join(dict.fromkeys(r for layer in found.unbuilt for r in layer.requirements))
    fetch = f"Python packages to fetch into a layer: {unbuilt}" if unbuilt else ""
    if missing:
        return Scan(path, task, False, f"needs what the toolchain lacks: {', '.join(missing)}"
                                       + (f"; and {fetch}" if fetch else ""))
    if sandbox is None:
        return Scan(path, task, True, f"loaded; needs met (environment not built{'; ' + fetch if fetch else ''})")
    try:
        workspace = build(task, sandbox, limits)
        scores, served = {}, False
        for name, solution in (("oracle", None), ("noop", NOOP)):
            if (name == "oracle" and oracle) or (name == "noop" and noop):
                trial = run_trial(sandbox, task, solution, limits, workspace=workspace)
                if trial.failed:
                    return Scan(path, task, False, f"{name}: {trial.reason}", failed=True, **scores)
                scores[name], served = trial.reward, served or trial.services
    except SetupFailed as e:
        return Scan(path, task, False, str(e), failed=e.infrastructure)
    except Unrunnable as e:
        return Scan(path, task, False, str(e))
    return _judged(path, task, scores, served)


def _judged(path: Path, task: HarborTask, scores: dict, served: bool = False) -> Scan:
    if scores.get("oracle", 1.0) < 1.0:
        return Scan(path, task, False, f"the oracle scores {scores['oracle']}, not 1", **scores)
    if scores.get("noop", 0.0) > 0.0:
        return Scan(path, task, False, f"doing nothing scores {scores['noop']}: the tests do not check the work",
                    **scores)
    done = ["environment built", *(f"{k} {v}" for k, v in scores.items())]
    if served:  # runnable as a trial; an agent's processes end with each of its commands
        done.append("the oracle's processes served its tests in one job (an agent's would not outlive its command)")
    return Scan(path, task, True, "; ".join(done), **scores)
