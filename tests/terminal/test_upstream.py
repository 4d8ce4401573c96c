"""The generated tasks built from upstream: a library pinned in the lock is downloaded by pip,
verified by sha256, unpacked into the cache with its licence recorded from its own metadata,
mutated and materialised (`python -m tempering.tasks.terminal build`); offline with a warm cache
works, offline with a cold one is one line and the generated tasks are left out, a hash
mismatch is an error naming the library. A tiny library of our own, served to a real pip from a
local folder (no PyPI), stands in for the upstream ones."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile

import pytest

from tempering.tasks.terminal.upstream import license_of

SOURCE = "def add(a, b):\n    return a + b\n"
TESTS = "from tinylib import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"


def _sdist(where) -> str:
    """tinylib-1.0.tar.gz in `where`; returns its sha256."""
    top = where / "src" / "tinylib-1.0"
    (top / "tinylib").mkdir(parents=True)
    (top / "tinylib" / "__init__.py").write_text(SOURCE)
    (top / "tests").mkdir()
    (top / "tests" / "test_tiny.py").write_text(TESTS)
    (top / "LICENSE").write_text("tinylib: a library written for this test, under the MIT licence.\n")
    (top / "PKG-INFO").write_text("Metadata-Version: 2.4\nName: tinylib\nVersion: 1.0\nLicense-Expression: MIT\n")
    (top / "pyproject.toml").write_text('[build-system]\nrequires = ["setuptools"]\n'
                                        'build-backend = "setuptools.build_meta"\n'
                                        '[project]\nname = "tinylib"\nversion = "1.0"\n')
    (where / "links").mkdir()
    path = where / "links" / "tinylib-1.0.tar.gz"
    with tarfile.open(path, "w:gz") as tf:
        tf.add(top, arcname="tinylib-1.0")
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _data(where, sha256: str) -> None:
    (where / "tasks").mkdir(parents=True)
    (where / "libraries.lock.toml").write_text(
        '[[library]]\nname = "tinylib"\nversion = "1.0"\nsdist = "tinylib-1.0.tar.gz"\n'
        f'sha256 = "{sha256}"\nlicense_file = "LICENSE"\nsrc_root = ""\napp_files = ["tinylib/__init__.py"]\n'
        'test_root = "tests"\ntests = { "test_tiny.py" = "test_tiny.py" }\nsupport = []\n'
        'imports = ["tinylib"]\nwhy = "a test"\n')
    record = {"id": "bugfix-tinylib-001", "library": "tinylib", "version": "1.0", "file": "tinylib/__init__.py",
              "line": 2, "col": 11, "end_col": 16, "original": "a + b", "mutated": "a - b",
              "operator": "arithmetic", "description": "`+` became `-`", "function": "add",
              "original_line": "    return a + b", "mutated_line": "    return a - b", "tests": ["test_tiny.py"],
              "failing": [{"test": "test_tiny.py::test_add", "message": "assert -1 == 5"}], "n_failing": 1}
    (where / "mutations.jsonl").write_text(json.dumps(record) + "\n")


@pytest.fixture
def world(tmp_path):
    sha = _sdist(tmp_path)
    _data(tmp_path / "data", sha)
    (tmp_path / "empty").mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "PYTHON"))}
    # pip reads only the local folder; the sdist's metadata is prepared without fetching a backend
    env.update(TEMPERING_TERMINAL_DATA=str(tmp_path / "data"), TEMPERING_CACHE=str(tmp_path / "cache"),
               PIP_NO_INDEX="1", PIP_FIND_LINKS=str(tmp_path / "links"), PIP_NO_BUILD_ISOLATION="0",
               PIP_CONFIG_FILE=os.devnull)
    return tmp_path, env


def cli(env, *args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tempering.tasks.terminal", *args], env=env, capture_output=True,
                          text=True, timeout=120)


def test_build_fetches_verifies_records_the_licence_and_mutates(world):
    tmp, env = world
    r = cli(env, "build")
    assert r.returncode == 0, r.stderr
    assert "1 generated tasks" in r.stdout and "tinylib fetched" in r.stdout, r.stdout
    lib = tmp / "cache" / "terminal" / "libraries" / "tinylib-1.0"
    meta = json.loads((lib / "library.json").read_text())
    assert meta["license"] == "MIT" and (lib / "LICENSE").is_file() and (lib / "app" / "tinylib" / "__init__.py").read_text() == SOURCE
    (task,) = [json.loads(line) for line in cli(env, "list", "--kind", "generated", "--json").stdout.splitlines()]
    assert task["name"] == "bugfix-tinylib-001" and task["origin"]["license"] == "MIT"
    out = tmp / "out"
    assert cli(env, "materialize", str(out), "bugfix-tinylib-001").returncode == 0
    app = out / "bugfix-tinylib-001" / "environment" / "app"
    assert (app / "tinylib" / "__init__.py").read_text() == "def add(a, b):\n    return a - b\n"
    assert (out / "bugfix-tinylib-001" / "tests" / "test_tiny.py").read_text() == TESTS
    # offline with a warm cache: the sdist is in the cache, the index has nothing
    shutil.rmtree(lib)
    env["PIP_FIND_LINKS"] = str(tmp / "empty")
    r = cli(env, "build")
    assert r.returncode == 0 and "all cached" not in r.stdout and lib.is_dir(), (r.stdout, r.stderr)


def test_offline_with_a_cold_cache_is_one_line_and_leaves_the_generated_tasks_out(world):
    tmp, env = world
    env["PIP_FIND_LINKS"] = str(tmp / "empty")
    r = cli(env, "build", "--offline-ok")
    problems = [line for line in r.stderr.splitlines() if "downloading" not in line]  # not the progress line
    assert r.returncode == 0 and len(problems) == 1 and "tinylib 1.0" in problems[0], r.stderr
    assert cli(env, "build").returncode == 1
    r = cli(env, "list", "--kind", "generated")
    assert r.returncode == 0 and r.stdout == "" and "left out" in r.stderr, r


def test_a_hash_mismatch_is_an_error_naming_the_library(world):
    tmp, env = world
    with open(tmp / "links" / "tinylib-1.0.tar.gz", "ab") as f:
        f.write(b"\0")
    r = cli(env, "build", "--offline-ok")  # a mismatch is never excused as offline
    assert r.returncode == 1 and "tinylib 1.0" in r.stderr and "sha256" in r.stderr, r.stderr
    assert not (tmp / "cache" / "terminal" / "sdists" / "tinylib-1.0.tar.gz").exists()  # nothing unverified kept
    assert not (tmp / "cache" / "terminal" / "libraries" / "tinylib-1.0").exists()


BSD3 = "Redistribution ... Neither the names of its contributors may be used to endorse or\npromote products ..."


@pytest.mark.parametrize("info, text, expected", [
    ({"license-expression": ["BSD-3-Clause"], "license": ["MIT"]}, "", "BSD-3-Clause"),
    ({"license": ["MIT"], "classifier": ["License :: OSI Approved :: BSD License"]}, "", "MIT"),
    ({"license": ["Copyright " + "(c) 2021, someone"], "classifier": ["License :: OSI Approved :: BSD License"]},
     BSD3, "BSD-3-Clause"),
    ({"classifier": ["License :: OSI Approved :: BSD License"]}, "Redistribution ... two clauses only", "BSD-2-Clause"),
    ({"classifier": ["Programming Language :: Python", "License :: OSI Approved :: MIT License"]}, "", "MIT"),
    ({}, "", "unknown: no licence in the metadata"),
])
def test_the_licence_is_read_from_the_package_metadata(info, text, expected):
    assert license_of(info, text) == expected
