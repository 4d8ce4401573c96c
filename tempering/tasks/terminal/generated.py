"""Generated bug-fix tasks: one mutation of an upstream library, materialised as a Harbor folder.

The repository holds one line per task in the data folder's `mutations.jsonl` (written by
scripts/generate_mutation_tasks.py: library, file, line, the mutation, the failing tests); the
libraries themselves are fetched from PyPI into the cache at set-up (`upstream`: `app/` the
trimmed source that becomes the workspace, `tests/` its test files, its licence, `library.json`).
`materialize(name, dest)` writes the task: the workspace with the one mutated line, the hidden
tests (the library's test files the mutation breaks, a verifier conftest that imports the library
from /app, test.sh), the oracle (solve.sh restores the line) and an instruction naming the failing
tests and their messages. `build` makes every library and task folder ready in the cache.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable

from tempering.tasks.terminal import data, templates, upstream
from tempering.tasks.terminal.mutate import Mutation, apply

HERE = Path(__file__).resolve().parent


@functools.cache
def records() -> dict[str, dict]:
    """Task name -> its mutation record, in file order. A record whose library or version is
    not the lock's is an error naming both (the two files are written together)."""
    path = data.mutations_file()
    pins = upstream.pins()
    out = {}
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            r = json.loads(line)
            pin = pins.get(r["library"])
            if pin is None or pin.version != r["version"]:
                raise upstream.UpstreamError(f"{path}:{i}: {r['library']} {r['version']} is not pinned in "
                                             f"{data.lock_file()} ({pin.version if pin else 'absent'} there)")
            out[r["id"]] = r
    return out


def library_dir(name: str) -> Path:
    return upstream.library_dir(upstream.pins()[name])


@functools.cache
def library(name: str) -> dict:
    """The unpacked library's metadata (its licence as recorded from the package)."""
    return upstream.meta(upstream.pins()[name])


def built() -> bool:
    """Every library of the lock is unpacked in the cache."""
    return all(upstream.built(pin) for pin in upstream.pins().values())


def trim_test_module(source: str, keep_classes: set[str]) -> str:
    """The test module without the test classes not in `keep_classes` (nor base classes of kept
    ones): a task whose tests are a few classes of a big file ships and runs only those. Module
    level code (imports, helpers, constants) is kept as it is."""
    tree = ast.parse(source)
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    keep, todo = set(), [c for c in keep_classes if c in classes]
    while todo:
        name = todo.pop()
        if name in keep:
            continue
        keep.add(name)
        todo += [b.id for b in classes[name].bases if isinstance(b, ast.Name) and b.id in classes]
    lines = source.splitlines(keepends=True)
    drop = set()
    for name, node in classes.items():
        if name not in keep and any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name.startswith("test")
                                    for n in ast.walk(node)):
            start = min([node.lineno] + [d.lineno for d in node.decorator_list])
            drop.update(range(start - 1, node.end_lineno))
    return "".join(ln for i, ln in enumerate(lines) if i not in drop)


def test_files(tests: list[str]) -> dict[str, set[str] | None]:
    """Test file -> the classes a selection runs from it (None: the whole file)."""
    out: dict[str, set[str] | None] = {}
    for t in tests:
        file, _, rest = t.partition("::")
        if not rest:
            out[file] = None
        elif out.get(file, set()) is not None:
            out.setdefault(file, set()).add(rest.split("::")[0])
    return out


def write_test_files(lib_dir: Path, tests: list[str], into: Path) -> None:
    """Copy the test files a selection needs into `into`, trimmed to its classes."""
    for file, classes in test_files(tests).items():
        text = (lib_dir / "tests" / file).read_text(encoding="utf-8")
        if classes is not None:
            text = trim_test_module(text, classes)
        (into / file).write_text(text, encoding="utf-8")


def _mutation(r: dict) -> Mutation:
    return Mutation(r["line"], r["col"], r["end_col"], r["original"], r["mutated"], r["operator"],
                    r["function"], r["description"])


def difficulty(r: dict) -> str:
    """easy: a small library or a bug that fails many tests; hard: a big library and one or two
    failing tests; medium otherwise."""
    lines = library(r["library"]).get("source_lines", 0)
    n = r["n_failing"]
    if lines < 800 or (n >= 10 and lines < 3000):
        return "easy"
    if lines > 3000 and n <= 2:
        return "hard"
    return "medium"


def origin(r: dict) -> dict:
    """What task.toml's [metadata.origin] records (and the catalog shows)."""
    return {"library": r["library"], "version": r["version"], "license": library(r["library"])["license"],
            "file": r["file"], "line": r["line"], "operator": r["operator"],
            "mutation": r["description"], "failing_tests": [f["test"] for f in r["failing"]],
            "n_failing": r["n_failing"]}


def tags(r: dict) -> list[str]:
    return ["python", "bug-fix", "generated", r["library"], r["operator"]]


def _fence(text: str) -> str:
    """A failure message as the instruction shows it: pytest's hint about -v dropped, no fence."""
    lines = [ln.rstrip() for ln in text.replace("```", "'''").splitlines() if "Use -v to get" not in ln]
    while lines and not lines[-1].strip():
        lines.pop()
    return "\n".join(lines)


def instruction(r: dict) -> str:
    lib = library(r["library"])
    shown = r["failing"]
    n = r["n_failing"]
    head = (f"{n} of its tests fail" if n > 1 else "one of its tests fails")
    more = f" (the first {len(shown)} are listed)" if n > len(shown) else ""
    out = [
        f"# Fix the bug in {r['library']} {r['version']}",
        "",
        f"The directory `/app` holds the source code of the Python library `{r['library']}` "
        f"{r['version']} ({lib['license']} licence, text in `/app/{lib['license_file']}`). A bug has "
        "been introduced into it: one small change somewhere in the library's code. The library's "
        f"own test suite, which is not in `/app`, now finds it: {head}{more}.",
        "",
    ]
    for f in shown:
        out += [f"- `{f['test']}`", ""]
        if f["message"]:
            out += ["  ```"] + ["  " + ln for ln in _fence(f["message"]).splitlines()] + ["  ```", ""]
    out += [
        "Find the bug and fix it in the library's source under `/app`, so that the library behaves "
        "as its tests expect again. Change only the library's code; do not add, move or rename "
        "files. `python3` (3.11) is available: for example "
        f"`cd /app && python3 -c \"import {lib['imports'][0]}\"`.",
        "",
    ]
    return "\n".join(out)


def solve_sh(r: dict, good: bytes, bad: bytes) -> str:
    return (
        "#!/bin/bash\n"
        f"# Oracle: restore line {r['line']} of {r['file']} as it is in {r['library']} {r['version']}.\n"
        "cd /app || exit 1\n"
        "python3 - <<'PYEOF'\n"
        "from pathlib import Path\n"
        f"path = Path({r['file']!r})\n"
        "lines = path.read_bytes().split(b\"\\n\")\n"
        f"i = {r['line'] - 1}\n"
        f"bad = {bad!r}\n"
        f"good = {good!r}\n"
        "if lines[i] != bad:\n"
        "    raise SystemExit(f\"{path}:{i + 1} is not the line the bug left there\")\n"
        "lines[i] = good\n"
        "path.write_bytes(b\"\\n\".join(lines))\n"
        "PYEOF\n"
    )


def task_toml(r: dict) -> str:
    return templates.task_toml(difficulty=difficulty(r), category="debugging", tags=tags(r),
                            origin=origin(r), author="Tempering (generated by scripts/generate_mutation_tasks.py)")


def materialize(name: str, dest: Path) -> Path:
    """Write the generated task `name` as a Harbor folder at `dest` (which must not exist)."""
    r = records()[name]
    lib_dir = library_dir(r["library"])
    lib = library(r["library"])
    dest = Path(dest)
    dest.mkdir(parents=True)
    env = dest / "environment"
    app = env / "app"
    shutil.copytree(lib_dir / "app", app)
    shutil.copy2(lib_dir / lib["license_file"], app / lib["license_file"])
    target = app / r["file"]
    source = target.read_bytes().decode("utf-8")
    mutated = apply(source, _mutation(r))
    target.write_bytes(mutated.encode("utf-8"))
    good = source.encode("utf-8").split(b"\n")[r["line"] - 1]
    bad = mutated.encode("utf-8").split(b"\n")[r["line"] - 1]
    (env / "Dockerfile").write_text(templates.DOCKERFILE)

    tests = dest / "tests"
    tests.mkdir()
    write_test_files(lib_dir, r["tests"], tests)
    for f in lib["support_files"]:
        if f != "conftest.py":
            shutil.copy2(lib_dir / "tests" / f, tests / f)
    conftest = templates.conftest_header(lib["imports"])
    if "conftest.py" in lib["support_files"]:
        conftest += "\n# --- the library's own conftest.py ---\n" + (lib_dir / "tests" / "conftest.py").read_text()
    (tests / "conftest.py").write_text(conftest)
    (tests / "pytest.ini").write_text(templates.PYTEST_INI)
    (tests / "test.sh").write_text(templates.test_sh(r["tests"]))

    (dest / "solution").mkdir()
    (dest / "solution" / "solve.sh").write_text(solve_sh(r, good, bad))
    (dest / "instruction.md").write_text(instruction(r))
    (dest / "task.toml").write_text(task_toml(r))
    return dest


def tasks_dir() -> Path:
    """Where this version of the generated tasks is materialised in the cache: named by a hash
    of what makes them (the lock, the mutations, this package's code), so a change makes anew."""
    h = hashlib.sha256()
    for path in (data.lock_file(), data.mutations_file(), HERE / "generated.py", HERE / "templates.py",
                 HERE / "mutate.py"):
        h.update(path.name.encode() + b"\0" + path.read_bytes())
    return upstream.root() / f"tasks-{h.hexdigest()[:16]}"


def folder(name: str) -> Path:
    """The generated task `name` as a Harbor folder in the cache, materialised on first use
    (atomically: concurrent processes may race to it)."""
    dest = tasks_dir() / name
    if not dest.is_dir():
        dest.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=dest.parent))
        try:
            materialize(name, staging / name)
            os.rename(staging / name, dest)
        except OSError:
            if not dest.is_dir():  # not another process's finished copy (the same): a real failure
                raise
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return dest


def build(log: Callable[[str], None] = print) -> str:
    """Every library fetched, verified and unpacked, and every generated task materialised, in
    the cache; returns what was done, in one line. Raises upstream.Offline for a cold library
    that cannot be downloaded, UpstreamError for one that does not match its lock."""
    pins = upstream.pins()
    fetched = [pin.name for pin in pins.values() if not upstream.built(pin)]
    for pin in pins.values():
        upstream.ensure(pin, log)
    names = list(records())
    for name in names:
        folder(name)
    for old in upstream.root().glob("tasks-*"):  # earlier versions' folders
        if old != tasks_dir():
            shutil.rmtree(old, ignore_errors=True)
    return (f"terminal tasks: {len(pins)} libraries ({', '.join(fetched) + ' fetched' if fetched else 'all cached'}), "
            f"{len(names)} generated tasks in {tasks_dir()}")
