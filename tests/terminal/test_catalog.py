"""The terminal task catalog: counts, recorded provenance, the Harbor layout of materialised
folders, and the generated tasks' mutations (no sandbox needed; the generated tasks need their
upstream libraries in the cache, which scripts/setup.sh fetches)."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tempering.tasks import terminal
from tempering.tasks.terminal import data, generated, templates
from tempering.tasks.terminal.mutate import apply, find_mutations

PERMISSIVE = {"MIT", "BSD-2-Clause", "BSD-3-Clause", "Apache-2.0", "PSF-2.0", "ISC"}
built = pytest.mark.skipif(not generated.built(), reason="the upstream libraries are not in the cache "
                           "(python -m tempering.tasks.terminal build)")


@built
def test_counts():
    assert len(terminal.names(terminal.HAND_WRITTEN)) >= 30
    assert len(terminal.names(terminal.GENERATED)) >= 200
    assert len(set(terminal.names())) == len(terminal.names())


def test_hand_written_variety():
    categories = {t.category for t in terminal.tasks(terminal.HAND_WRITTEN)}
    assert {"debugging", "programming", "data-processing", "cli", "refactoring"} <= categories


@built
def test_generated_provenance():
    libs = {lib["name"]: lib for lib in terminal.libraries()}
    assert len(libs) >= 5
    for t in terminal.tasks(terminal.GENERATED):
        o = t.origin
        assert o["library"] in libs and o["version"] == libs[o["library"]]["version"]
        assert o["license"] in PERMISSIVE
        assert o["failing_tests"] and o["n_failing"] >= len(o["failing_tests"])
        assert o["file"] and o["line"] > 0
    for name, lib in libs.items():
        folder = generated.library_dir(name)
        assert (folder / lib["license_file"]).is_file(), f"{name}: no licence text"
        assert lib["license"] in PERMISSIVE


@built
def test_notice_lists_every_library():
    notice = (data.root() / "README.md").read_text()
    for lib in terminal.libraries():
        assert f"| {lib['name']} | {lib['version']} | {lib['license']} |" in notice, lib["name"]


@built
def test_records_apply_to_the_upstream_sources():
    for name, r in generated.records().items():
        source = (generated.library_dir(r["library"]) / "app" / r["file"]).read_text(encoding="utf-8")
        mutated = apply(source, generated._mutation(r))
        assert mutated != source
        assert mutated.splitlines()[r["line"] - 1] == r["mutated_line"], name
        assert source.splitlines()[r["line"] - 1] == r["original_line"], name


def test_needs_declared():
    for t in terminal.tasks():
        assert {"bash", "python3", "pytest"} <= set(t.commands), t.name
        assert "pytest" in t.python_packages, t.name


def _check_layout(folder: Path):
    for rel in ("instruction.md", "task.toml", "environment/Dockerfile", "tests/test.sh", "solution/solve.sh"):
        assert (folder / rel).is_file(), f"{folder.name}: no {rel}"
    toml = tomllib.loads((folder / "task.toml").read_text())
    for table in ("metadata", "verifier", "agent", "environment", "tempering"):
        assert table in toml, f"{folder.name}: no [{table}]"
    assert toml["metadata"]["difficulty"] in ("easy", "medium", "hard")
    assert toml["metadata"]["category"] and toml["metadata"]["tags"]
    assert toml["verifier"]["timeout_sec"] > 0 and toml["agent"]["timeout_sec"] > 0
    docker = (folder / "environment" / "Dockerfile").read_text().splitlines()
    assert [ln for ln in docker if ln.startswith("WORKDIR")][-1] == "WORKDIR /app"
    test_sh = (folder / "tests" / "test.sh").read_text()
    assert "/logs/verifier/reward.txt" in test_sh and "--rootdir=/tests" in test_sh
    assert "PYTHONPATH" not in test_sh and "uvx" not in test_sh and "curl" not in test_sh
    # the hidden tests are not in the workspace
    hidden = {p.name for p in (folder / "tests").rglob("test_*.py")}
    assert hidden
    in_env = {p.name for p in (folder / "environment").rglob("*")}
    assert not hidden & in_env, f"{folder.name}: test files in environment/"
    # every conftest that imports workspace code uses the verifier header
    conftest = folder / "tests" / "conftest.py"
    if conftest.exists():
        assert conftest.read_text().startswith('"""Verifier set-up')


def test_hand_written_layout(tmp_path):
    for name in terminal.names(terminal.HAND_WRITTEN):
        folder = terminal.materialize(name, tmp_path)
        assert folder == tmp_path / name
        _check_layout(folder)


@built
def test_generated_layout(tmp_path):
    # a task of every library and of every mutation kind
    seen, sample = set(), []
    for name, r in generated.records().items():
        if r["library"] not in seen or r["operator"] not in seen:
            seen |= {r["library"], r["operator"]}
            sample.append(name)
    for name in sample:
        folder = terminal.materialize(name, tmp_path)
        _check_layout(folder)
        r = generated.records()[name]
        env_file = folder / "environment" / "app" / r["file"]
        assert env_file.read_text().splitlines()[r["line"] - 1] == r["mutated_line"]
        instruction = (folder / "instruction.md").read_text()
        assert r["failing"][0]["test"] in instruction
        assert "/tests" not in instruction
        toml = tomllib.loads((folder / "task.toml").read_text())
        assert toml["metadata"]["origin"]["library"] == r["library"]
        assert toml["metadata"]["origin"]["license"] == generated.library(r["library"])["license"]


@built
def test_generated_oracle_restores_the_library(tmp_path):
    """solve.sh's Python, run on the materialised workspace, gives back the upstream file."""
    name = terminal.names(terminal.GENERATED)[0]
    folder = terminal.materialize(name, tmp_path)
    r = generated.records()[name]
    script = (folder / "solution" / "solve.sh").read_text()
    code = script.split("<<'PYEOF'\n", 1)[1].rsplit("PYEOF", 1)[0]
    app = folder / "environment" / "app"
    subprocess.run([sys.executable, "-c", code], cwd=app, check=True)
    original = generated.library_dir(r["library"]) / "app" / r["file"]
    assert (app / r["file"]).read_bytes() == original.read_bytes()


def test_materialize_refuses_to_overwrite(tmp_path):
    name = terminal.names()[0]
    terminal.materialize(name, tmp_path)
    with pytest.raises(FileExistsError):
        terminal.materialize(name, tmp_path)
    terminal.materialize(name, tmp_path, overwrite=True)
    with pytest.raises(KeyError):
        terminal.get("no-such-task")


def test_mutation_operators():
    src = "def f(a, b):\n    if a < b and not a:\n        return g(a, b) + 1\n    return max(a, 0)\n"
    kinds = {m.operator for m in find_mutations(src)}
    assert {"compare", "boolean", "negation", "arithmetic", "off-by-one", "arguments", "return",
            "builtin"} <= kinds
    for m in find_mutations(src):
        out = apply(src, m)
        assert out.count("\n") == src.count("\n")
        assert [ln for ln in zip(src.splitlines(), out.splitlines()) if ln[0] != ln[1]] != []


def test_verifier_template_is_what_the_tasks_ship():
    """The hand-written tasks carry literal copies of the shared verifier files."""
    for name in terminal.names(terminal.HAND_WRITTEN):
        tests = data.hand_written_dir() / name / "tests"
        assert (tests / "pytest.ini").read_text() == templates.PYTEST_INI, name
        head = templates.TEST_SH.split("{targets}")[0]
        assert (tests / "test.sh").read_text().startswith(head), name


def test_jsonl_is_well_formed():
    lines = data.mutations_file().read_text().splitlines()
    ids = [json.loads(ln)["id"] for ln in lines]
    assert len(ids) == len(set(ids)) == len(generated.records())
