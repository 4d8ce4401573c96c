#!/usr/bin/env python3
"""Generate the mutation bug-fix tasks of the terminal task set from library sdists.

For each library below it downloads the sdist from PyPI (`pip download --no-binary :all:
--no-deps NAME==VERSION`; run it where PyPI is reachable) into the cache, pins it (name,
version, sha256 and the files the tasks use: a trimmed selection of its source, tests and
licence) in data/terminal/libraries.lock.toml, unpacks those files into the cache
(tempering.tasks.terminal.upstream, as set-up does), checks that the unmutated code passes
every test selection it will use, then proposes AST-located one-line mutations
(tempering.tasks.terminal.mutate) and runs the selected tests on each mutant, exactly as the
materialised task's verifier will (same conftest, pytest.ini and arguments; the workspace at a
temporary path instead of /app). A mutation is kept only if pytest exits 1 with at least one
failing test, in under its time limit; the failing tests and their messages are recorded.
Output: the lock and data/terminal/mutations.jsonl (one task per line); no library file is
written into the repository.

    python scripts/generate_mutation_tasks.py                # all libraries, 2 workers
    python scripts/generate_mutation_tasks.py --only toolz --workers 1
    python scripts/generate_mutation_tasks.py --python /path/to/python-with-pytest

The candidates are tried in an order fixed by --seed and judged in that order, so the output is
the same for any number of workers (given the same test outcomes). About 5 minutes with 2
workers on 2 cores.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import dataclasses
import hashlib
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import defaultdict, deque
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tempering.tasks.terminal import data, generated, templates, upstream  # noqa: E402
from tempering.tasks.terminal.mutate import Mutation, apply, find_mutations  # noqa: E402
BY_NAME = "by-name"  # select the test classes named after the mutated function


@dataclass
class Library:
    """How to turn one sdist into a task library.

    src_root: folder of the sdist whose `packages` go to the workspace (/app);
    test_root: folder holding the tests; `tests` maps a test file's path under test_root to its
    flat name in /tests; `support`: other files of test_root the tests import (conftest.py is
    appended to the verifier's conftest); `targets` maps a source file (relative to src_root) to
    the test files that cover it, or to BY_NAME (the test classes of `tests` named after the
    mutated top-level function); `drop`: regexes of workspace paths left out."""

    name: str
    version: str
    license_file: str
    src_root: str
    packages: list[str]
    imports: list[str]
    test_root: str
    tests: dict[str, str]
    targets: dict[str, list[str] | str]
    quota: int
    support: list[str] = field(default_factory=list)
    drop: list[str] = field(default_factory=list)
    keep_modules: list[str] | None = None  # for big packages: only these modules (+ what they import)
    slow_classes: tuple[str, ...] = ()  # test classes never selected (slow or timing-dependent)
    why: str = ""


def _flat(names):
    return {n: n.split("/")[-1] for n in names}


LIBRARIES = [
    Library(
        name="inflection", version="0.5.1", license_file="LICENSE",
        src_root="", packages=["inflection"], imports=["inflection"],
        test_root="", tests={"test_inflection.py": "test_inflection.py"},
        targets={"inflection/__init__.py": ["test_inflection.py"]}, quota=30,
        drop=[r"py\.typed$"],
        why="one module of string inflections (camelize, pluralize, ...), 455 fast parametrised tests"),
    Library(
        name="toolz", version="1.2.0", license_file="LICENSE.txt",
        src_root="", packages=["toolz"], imports=["toolz"],
        test_root="toolz", tests={
            "tests/test_itertoolz.py": "test_itertoolz.py",
            "tests/test_functoolz.py": "test_functoolz.py",
            "tests/test_dicttoolz.py": "test_dicttoolz.py",
            "tests/test_recipes.py": "test_recipes.py",
            "sandbox/tests/test_core.py": "test_sandbox_core.py",
        },
        targets={"toolz/itertoolz.py": ["test_itertoolz.py"], "toolz/functoolz.py": ["test_functoolz.py"],
                 "toolz/dicttoolz.py": ["test_dicttoolz.py"], "toolz/recipes.py": ["test_recipes.py"],
                 "toolz/sandbox/core.py": ["test_sandbox_core.py"]},
        quota=35, drop=[r"(^|/)tests/", r"py\.typed$"],
        why="functional utilities over iterables, functions and dicts; tests per module, under 0.5 s"),
    Library(
        name="more-itertools", version="11.2.1", license_file="LICENSE",
        src_root="", packages=["more_itertools"], imports=["more_itertools"],
        test_root="tests", tests={"test_more.py": "test_more.py", "test_recipes.py": "test_recipes.py"},
        targets={"more_itertools/more.py": BY_NAME, "more_itertools/recipes.py": BY_NAME},
        quota=40, drop=[r"\.pyi$", r"py\.typed$"], slow_classes=("TestConcurrentTee",),
        why="~270 small iterator functions, each with its own test class (the task runs that class)"),
    Library(
        name="six", version="1.17.0", license_file="LICENSE",
        src_root="", packages=["six.py"], imports=["six"],
        test_root="", tests={"test_six.py": "test_six.py"},
        targets={"six.py": ["test_six.py"]}, quota=15,
        why="the Python 2/3 compatibility module: one file, 200 tests in under a second"),
    Library(
        name="boltons", version="26.2.0", license_file="LICENSE",
        src_root="", packages=["boltons"], imports=["boltons"],
        test_root="tests", tests=_flat([
            "test_strutils.py", "test_iterutils.py", "test_dictutils.py", "test_setutils.py",
            "test_listutils.py", "test_mathutils.py", "test_queueutils.py", "test_cacheutils.py",
            "test_urlutils.py"]),
        support=["conftest.py"],
        targets={f"boltons/{m}.py": [f"test_{m}.py"] for m in (
            "strutils", "iterutils", "dictutils", "setutils", "listutils", "mathutils",
            "queueutils", "cacheutils", "urlutils")},
        keep_modules=["strutils", "iterutils", "dictutils", "setutils", "listutils", "mathutils",
                      "queueutils", "cacheutils", "urlutils"],
        quota=40, drop=[r"py\.typed$"],
        why="nine self-contained utility modules (strings, iterables, dicts, sets, caches, URLs)"),
    Library(
        name="isodate", version="0.7.2", license_file="LICENSE",
        src_root="src", packages=["isodate"], imports=["isodate"],
        test_root="tests", tests=_flat(["test_date.py", "test_time.py", "test_datetime.py",
                                        "test_duration.py", "test_strf.py", "test_pickle.py"]),
        targets={f"isodate/{m}.py": ["test_date.py", "test_time.py", "test_datetime.py",
                                     "test_duration.py", "test_strf.py"]
                 for m in ("isodates", "isotime", "isodatetime", "isoduration", "duration",
                           "isostrf", "isotzinfo", "tzinfo")},
        quota=30, drop=[r"py\.typed$"],
        why="ISO 8601 parsing and formatting of dates, times and durations; whole suite in ~0.3 s"),
    Library(
        name="tabulate", version="0.10.0", license_file="LICENSE",
        src_root="", packages=["tabulate"], imports=["tabulate"],
        test_root="test", tests=_flat(["test_output.py", "test_input.py", "test_internal.py",
                                       "test_regression.py", "test_textwrapper.py", "test_api.py"]),
        support=["common.py"],
        targets={"tabulate/__init__.py": ["test_output.py", "test_input.py", "test_internal.py",
                                          "test_regression.py", "test_textwrapper.py"]},
        quota=30, drop=[r"py\.typed$"],
        why="plain-text table formatting: one module, ~300 output and input tests"),
    Library(
        name="humanize", version="4.17.0", license_file="LICENCE",
        src_root="src", packages=["humanize"], imports=["humanize"],
        test_root="tests", tests=_flat(["test_number.py", "test_filesize.py", "test_lists.py"]),
        targets={"humanize/number.py": ["test_number.py"], "humanize/filesize.py": ["test_filesize.py"],
                 "humanize/lists.py": ["test_lists.py"]},
        quota=25, drop=[r"(^|/)locale/", r"py\.typed$"],
        why="human-readable numbers and file sizes (the time and i18n parts need freezegun: left out)"),
    Library(
        name="semver", version="3.1.2", license_file="LICENSE.txt",
        src_root="src", packages=["semver"], imports=["semver"],
        test_root="tests", tests=_flat([
            "test_bump.py", "test_bump_build_digitless.py", "test_bump_token_validation.py",
            "test_compare.py", "test_compare_invalid_operands.py", "test_deprecated_functions.py",
            "test_format.py", "test_immutable.py", "test_index.py", "test_match.py",
            "test_max-min.py", "test_next_version_legacy_order.py", "test_parsing.py",
            "test_replace.py", "test_semver.py", "test_strict_parsing.py", "test_subclass.py",
            "test_pysemver-cli.py"]),
        support=["conftest.py", "coerce.py", "semverwithvprefix.py"],
        targets={
            "semver/version.py": [
                "test_bump.py", "test_bump_build_digitless.py", "test_bump_token_validation.py",
                "test_compare.py", "test_compare_invalid_operands.py", "test_format.py",
                "test_immutable.py", "test_index.py", "test_match.py", "test_max-min.py",
                "test_next_version_legacy_order.py", "test_parsing.py", "test_replace.py",
                "test_semver.py", "test_strict_parsing.py", "test_subclass.py"],
            "semver/_deprecated.py": ["test_deprecated_functions.py"],
            "semver/cli.py": ["test_pysemver-cli.py"],
        },
        quota=30, drop=[r"py\.typed$"],
        why="semantic-version parsing, comparison and bumping, with a small CLI"),
]


# ---------------------------------------------------------------------------------------------
# sdists -> trimmed library copies


def download(lib: Library, pip: list[str]) -> Path:
    """The library's sdist in the cache's sdists/ folder (downloaded by pip when absent)."""
    cache = upstream.root() / "sdists"
    cache.mkdir(parents=True, exist_ok=True)
    stem = f"{lib.name}-{lib.version}".lower().replace("-", "_")

    def matches(p: Path) -> bool:
        return p.name.lower().replace("-", "_") in (stem + ".tar.gz", stem + ".zip")

    found = [p for p in cache.iterdir() if matches(p)]
    if not found:
        subprocess.run([*pip, "download", "--no-binary", ":all:", "--no-deps", "-q", "-d", str(cache),
                        f"{lib.name}=={lib.version}"], check=True)
        found = [p for p in cache.iterdir() if matches(p)]
    if len(found) != 1:
        raise SystemExit(f"{lib.name}: expected one sdist in {cache}, found {found}")
    return found[0]


def extract(sdist: Path, into: Path) -> Path:
    with tarfile.open(sdist) as tf:
        tf.extractall(into, filter="data")
    (top,) = [p for p in into.iterdir() if p.is_dir()]
    return top


def _module_deps(path: Path, package: str) -> set[str]:
    text = path.read_text(encoding="utf-8")
    deps = set(re.findall(r"^\s*from \.(\w+) import", text, re.M))
    deps |= set(re.findall(rf"\b{package}\.(\w+)", text))
    deps |= set(re.findall(rf"^\s*from {package} import (\w+)", text, re.M))
    return deps


def pin_for(lib: Library, sdist: Path, work: Path) -> upstream.Pin:
    """The lock entry: the sdist's hash and the trimmed selection of its files the tasks use."""
    top = extract(sdist, work / f"x-{lib.name}")
    src = top / lib.src_root if lib.src_root else top
    droppers = [re.compile(d) for d in lib.drop] + [re.compile(r"__pycache__|\.pyc$")]
    keep = None
    if lib.keep_modules is not None:
        (pkg,) = lib.packages
        keep, todo = set(), list(lib.keep_modules)
        for t in lib.tests:
            todo += list(_module_deps(top / lib.test_root / t, pkg))
        while todo:
            m = todo.pop()
            if m in keep or not (src / pkg / f"{m}.py").exists():
                continue
            keep.add(m)
            todo += list(_module_deps(src / pkg / f"{m}.py", pkg))
        keep |= {"__init__"}
    app_files = []
    for p in lib.packages:
        base = src / p
        for f in [base] if base.is_file() else sorted(f for f in base.rglob("*") if f.is_file()):
            rel = f.relative_to(src).as_posix()
            if any(d.search(rel) for d in droppers):
                continue
            if keep is not None and f.parent == base and f.suffix == ".py" and f.stem not in keep:
                continue
            app_files.append(rel)
    return upstream.Pin(lib.name, lib.version, sdist.name, hashlib.sha256(sdist.read_bytes()).hexdigest(),
                        lib.license_file, lib.src_root, tuple(sorted(app_files)), lib.test_root, dict(lib.tests),
                        tuple(lib.support), tuple(lib.imports), lib.why)


def _toml(value) -> str:
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a TOML basic string
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return "{ " + ", ".join(f"{_toml(k)} = {_toml(v)}" for k, v in value.items()) + " }"


def write_lock(pins: list[upstream.Pin]) -> None:
    lines = ["# The upstream libraries of the generated terminal tasks, pinned by name, version and the",
             "# sdist's sha256, and the files of each sdist the tasks use (paths inside its top folder).",
             "# Written by scripts/generate_mutation_tasks.py; read by tempering.tasks.terminal.upstream,",
             "# which downloads, verifies and unpacks them at set-up (python -m tempering.tasks.terminal build)."]
    for pin in pins:
        lines += ["", "[[library]]"] + [f"{k} = {_toml(v)}" for k, v in dataclasses.asdict(pin).items()]
    data.lock_file().write_text("\n".join(lines) + "\n", encoding="utf-8")


# ---------------------------------------------------------------------------------------------
# running the tests, as the verifier does


def class_selection(test_dir: Path, test_files: list[str]) -> dict[str, list[str]]:
    """normalised function name -> node ids of the test classes named after it."""
    import ast

    out: dict[str, list[str]] = defaultdict(list)
    for tf in test_files:
        tree = ast.parse((test_dir / tf).read_text(encoding="utf-8"))
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and any(
                    isinstance(n, ast.FunctionDef) and n.name.startswith("test") for n in node.body):
                key = re.sub(r"^Test|Tests?$", "", node.name).lower()
                out[key].append(f"{tf}::{node.name}")
    return out


def prepare_tests(lib_dir: Path, meta: dict, app: Path, into: Path) -> None:
    into.mkdir(parents=True, exist_ok=True)
    for name in meta["test_files"] + meta["support_files"]:
        if name != "conftest.py":
            shutil.copy2(lib_dir / "tests" / name, into / name)
    conftest = templates.conftest_header(meta["imports"], app=str(app))
    if "conftest.py" in meta["support_files"]:
        conftest += "\n# --- the library's own conftest.py ---\n" + (lib_dir / "tests" / "conftest.py").read_text()
    (into / "conftest.py").write_text(conftest)
    (into / "pytest.ini").write_text(templates.PYTEST_INI)


def run_pytest(python: str, tests: Path, targets: list[str], timeout: float) -> dict:
    report = tests / "report.xml"
    if report.exists():
        report.unlink()
    cmd = [python, "-m", "pytest", "-c", str(tests / "pytest.ini"), f"--rootdir={tests}", "-p",
           "no:cacheprovider", "-q", f"--junitxml={report}", *targets]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["PYTHONHASHSEED"] = "0"  # test ids and order built from sets stay the same between runs
    t0 = time.monotonic()
    try:
        proc = subprocess.run(cmd, cwd=tests, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"status": "timeout", "seconds": time.monotonic() - t0, "passed": 0, "failing": [], "skipped": 0,
                "output": f"timed out after {timeout:.0f} s"}
    seconds = time.monotonic() - t0
    result = {"status": proc.returncode, "seconds": seconds, "passed": 0, "failing": [], "skipped": 0}
    if not report.exists():
        result["output"] = (proc.stdout + proc.stderr)[-2000:]
        return result
    root = ET.parse(report).getroot()
    for case in root.iter("testcase"):
        bad = case.find("failure")
        if bad is None:
            bad = case.find("error")
        if case.find("skipped") is not None:
            result["skipped"] += 1
        elif bad is not None:
            parts = (case.get("classname") or "").split(".")
            nodeid = "::".join([parts[0] + ".py", *parts[1:], case.get("name", "")])
            message = (bad.get("message") or "").strip() or (bad.text or "").strip().splitlines()[-1:]
            if isinstance(message, list):
                message = message[0] if message else ""
            message = re.sub(r" at 0x[0-9a-f]+", " at 0x...", message)  # object addresses vary by run
            lines = message.splitlines()
            message = "\n".join(lines[:8])[:600] + ("\n..." if len(lines) > 8 or len(message) > 600 else "")
            result["failing"].append({"test": nodeid, "message": message})
        else:
            result["passed"] += 1
    if result["status"] != 0 and not result["failing"]:
        result["output"] = (proc.stdout + proc.stderr)[-2000:]
    return result


class Worker:
    """A private copy of one library's workspace and tests, reused for many mutants."""

    def __init__(self, lib_dir: Path, meta: dict, python: str):
        self.dir = Path(tempfile.mkdtemp(prefix=f"mut-{meta['name']}-"))
        self.app = self.dir / "app"
        shutil.copytree(lib_dir / "app", self.app)
        prepare_tests(lib_dir, meta, self.app, self.dir / "tests")
        self.python = python
        self.lib_dir = lib_dir

    def run(self, file: str, mutated_source: str | None, targets: list[str], timeout: float) -> dict:
        path = self.app / file
        original = path.read_bytes()
        # the test files as the task ships them (trimmed to the selected classes)
        generated.write_test_files(self.lib_dir, targets, self.dir / "tests")
        try:
            if mutated_source is not None:
                path.write_text(mutated_source, encoding="utf-8")
            return run_pytest(self.python, self.dir / "tests", targets, timeout)
        finally:
            path.write_bytes(original)

    def close(self):
        shutil.rmtree(self.dir, ignore_errors=True)


_WORKER: Worker | None = None
_BASELINES: dict[tuple, dict] = {}


def _init_worker(lib_dir, meta, python):
    global _WORKER
    _WORKER = Worker(Path(lib_dir), meta, python)


def _evaluate(job):
    """(baseline, result): the selection's run on the unmutated code (once per worker), then on
    the mutant, with a time limit of 4x the baseline's (at least 10 s)."""
    file, source, targets = job
    key = tuple(targets)
    if key not in _BASELINES:
        _BASELINES[key] = _WORKER.run(file, None, targets, timeout=120)
    base = _BASELINES[key]
    if base["status"] != 0 or base["failing"] or base["passed"] == 0:
        return base, None
    return base, _WORKER.run(file, source, targets, max(10.0, 4 * base["seconds"]))


# ---------------------------------------------------------------------------------------------
# choosing mutations


def candidates(lib: Library, lib_dir: Path, meta: dict, rng: random.Random):
    """(file, Mutation, targets) in the order they are tried: round-robin over mutation kinds
    (each kind shuffled), so the kept set mixes kinds, files and functions."""
    by_name = class_selection(lib_dir / "tests", meta["test_files"])
    pools: dict[str, list] = defaultdict(list)
    for file, sel in lib.targets.items():
        source = (lib_dir / "app" / file).read_text(encoding="utf-8")
        for m in find_mutations(source, validate=False):
            if sel == BY_NAME:
                top = m.function.split(".")[0].lower().replace("_", "") if m.function else ""
                targets = [t for t in by_name.get(top, []) if t.split("::")[1] not in lib.slow_classes]
                if not targets:
                    continue
            else:
                targets = list(sel)
            pools[m.operator].append((file, m, targets))
    for pool in pools.values():
        rng.shuffle(pool)
    # the blunt kinds (a return value replaced by None, swapped arguments) come half as often
    kinds = [k for k in sorted(pools) for _ in range(1 if k in ("return", "arguments") else 2)]
    rng.shuffle(kinds)
    while any(pools.values()):
        for k in kinds:
            if pools[k]:
                yield pools[k].pop()


def generate(lib: Library, lib_dir: Path, meta: dict, python: str, workers: int, seed: int, log) -> list[dict]:
    rng = random.Random(f"{seed}:{lib.name}")
    order = list(candidates(lib, lib_dir, meta, rng))
    log(f"  {lib.name}: {len(order)} candidate mutations")
    kept: list[dict] = []
    per_function: dict[tuple, int] = defaultdict(int)
    bad_baselines: dict[tuple, dict] = {}
    sources = {f: (lib_dir / "app" / f).read_text(encoding="utf-8") for f in lib.targets}
    tried = survived = other = 0
    slowest = 0.0
    it = iter(order)
    # Results are taken in the order the candidates were submitted, so the kept set is the
    # first `quota` qualifying candidates of `order` whatever the number of workers.
    with cf.ProcessPoolExecutor(workers, initializer=_init_worker,
                                initargs=(str(lib_dir), meta, python)) as pool:
        pending: deque = deque()

        def submit_next():
            for file, m, targets in it:
                if tuple(targets) in bad_baselines or per_function[(file, m.function)] >= 2:
                    continue  # would be refused below anyway: skipping it saves a run
                pending.append((pool.submit(_evaluate, (file, apply(sources[file], m), targets)), file, m, targets))
                return

        for _ in range(workers * 2):
            submit_next()
        while pending and len(kept) < lib.quota:
            fut, file, m, targets = pending.popleft()
            base, r = fut.result()
            slowest = max(slowest, base["seconds"])
            if r is None:
                if tuple(targets) not in bad_baselines:
                    bad_baselines[tuple(targets)] = base
                    log(f"  {lib.name}: the unmutated code fails {targets} ({base['status']}): "
                        f"{base.get('output') or base['failing'][:2]}")
            elif per_function[(file, m.function)] < 2:
                tried += 1
                if r["status"] == 1 and r["failing"]:
                    per_function[(file, m.function)] += 1
                    kept.append(record(lib, file, m, targets, r, sources[file]))
                elif r["status"] == 0:
                    survived += 1
                else:
                    other += 1
            submit_next()
        for fut, *_ in pending:
            fut.cancel()
    log(f"  {lib.name}: kept {len(kept)} of {tried} mutants tried ({survived} passed every selected "
        f"test, {other} broke the test run itself or timed out); slowest unmutated selection {slowest:.2f} s")
    kept.sort(key=lambda r: (r["file"], r["line"], r["col"], r["mutated"]))
    for i, r in enumerate(kept, 1):
        r["id"] = f"bugfix-{lib.name}-{i:03d}"
    return kept


def narrowed(targets: list[str], failing: list[dict]) -> list[str]:
    """The selection's files (or classes) that hold a failing test: what the task's verifier
    runs, so that it stays fast while still checking the behaviour around the bug."""
    ids = [f["test"] for f in failing]
    return [t for t in targets if any(i == t or i.startswith(t + "::") for i in ids)] or targets


def record(lib, file, m: Mutation, targets, r, source) -> dict:
    line = source.splitlines()[m.line - 1]
    mutated_line = apply(source, m).splitlines()[m.line - 1]
    return {
        "id": None, "library": lib.name, "version": lib.version,
        "file": file, "line": m.line, "col": m.col, "end_col": m.end_col,
        "original": m.original, "mutated": m.mutated, "operator": m.operator,
        "description": m.description, "function": m.function,
        "original_line": line, "mutated_line": mutated_line,
        "tests": narrowed(targets, r["failing"]),
        "failing": r["failing"][:5], "n_failing": len(r["failing"]),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", action="append", help="generate only these libraries (repeatable)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--python", default=sys.executable, help="a Python with pytest, to run the tests")
    ap.add_argument("--pip", default=f"{sys.executable} -m pip")
    args = ap.parse_args(argv)
    libs = [lib for lib in LIBRARIES if not args.only or lib.name in args.only]
    if args.only and len(libs) != len(args.only):
        raise SystemExit(f"unknown library in {args.only}; known: {[lib.name for lib in LIBRARIES]}")

    mutations = data.mutations_file()
    existing = [json.loads(ln) for ln in mutations.read_text().splitlines() if ln.strip()] if mutations.exists() else []
    names = {lib.name for lib in libs}
    out = [r for r in existing if r["library"] not in names]
    pins = {name: pin for name, pin in upstream.pins().items() if name not in names} if data.lock_file().exists() else {}
    t0 = time.monotonic()

    def log(msg):
        print(f"[{time.monotonic() - t0:7.1f}s] {msg}", flush=True)

    with tempfile.TemporaryDirectory(prefix="tempering-gen-") as work:
        for lib in libs:
            log(f"{lib.name} {lib.version}")
            pin = pins[lib.name] = pin_for(lib, download(lib, args.pip.split()), Path(work))
            shutil.rmtree(upstream.library_dir(pin), ignore_errors=True)  # unpacked afresh from the pin
            lib_dir = upstream.unpack(pin, upstream.fetch(pin))
            out += generate(lib, lib_dir, upstream.meta(pin), args.python, args.workers, args.seed, log)
    order = [lib.name for lib in LIBRARIES]
    write_lock([pins[name] for name in order if name in pins])
    out.sort(key=lambda r: (order.index(r["library"]), r["id"]))
    mutations.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in out))
    log(f"wrote {len(out)} tasks to {mutations} and the lock {data.lock_file()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
