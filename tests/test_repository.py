"""The repository holds only what its authors wrote, and the wheel only code.

Judged on `git ls-files` of this checkout: no path names a module of the upstream libraries the
generated terminal tasks use, no file is a licence text or carries a licence header, and no
four consecutive lines of any upstream file (as fetched into the cache at set-up) appear in a
tracked file. The wheel, built from a copy of the tracked files, holds the package's code and
nothing of the task data."""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tempering.tasks.terminal import generated, upstream

REPO = Path(__file__).resolve().parents[1]
# licence wording, kept as word lists so that this file carries none of it itself
HEADERS = [" ".join(words) for words in (
    ("Permission", "is", "hereby", "granted,", "free", "of", "charge"),
    ("Redistribution", "and", "use", "in", "source", "and", "binary", "forms"),
    ("Licensed", "under", "the", "Apache", "License"), ("GNU", "General", "Public", "License"),
    ("Copyright", "(c)"), ("THIS", "SOFTWARE", "IS", "PROVIDED", "BY", "THE", "COPYRIGHT", "HOLDERS"))]


def tracked() -> list[Path]:
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    return [REPO / p for p in out.decode().split("\0") if p and (REPO / p).is_file()]


def _text(path: Path) -> str | None:
    data = path.read_bytes()
    return None if b"\0" in data else data.decode("utf-8", errors="replace")


def test_no_upstream_module_or_licence_file_is_tracked():
    modules = {m for pin in upstream.pins().values() for m in pin.imports}
    for path in tracked():
        rel = path.relative_to(REPO)
        for part in rel.parts[:-1]:
            assert part not in modules, f"{rel}: a folder named after the upstream module {part!r}"
        assert rel.stem not in modules or rel.suffix != ".py", f"{rel}: a file named after an upstream module"
        assert not re.match(r"(LICEN[CS]E|COPYING|NOTICE)", rel.name, re.I), f"{rel}: a licence file"
        text = _text(path)
        for header in HEADERS if text is not None else ():
            assert header.lower() not in text.lower(), f"{rel}: carries licence wording {header!r}"


def _shingles(text: str) -> set[bytes]:
    """Hashes of each run of four consecutive substantial lines (whitespace-normalised)."""
    lines = [" ".join(ln.split()) for ln in text.splitlines()]
    lines = [ln for ln in lines if len(ln) >= 25]
    return {hashlib.blake2b("\n".join(lines[i:i + 4]).encode(), digest_size=12).digest()
            for i in range(len(lines) - 3)}


@pytest.mark.skipif(not generated.built(), reason="the upstream libraries are not in the cache "
                    "(python -m tempering.tasks.terminal build)")
def test_no_tracked_file_holds_upstream_text():
    theirs: set[bytes] = set()
    for pin in upstream.pins().values():
        for path in upstream.library_dir(pin).rglob("*"):
            if path.is_file() and path.name != "library.json":
                theirs |= _shingles(path.read_text(encoding="utf-8", errors="replace"))
    assert len(theirs) > 10_000  # the oracle itself has teeth: ~54k upstream lines
    for path in tracked():
        text = _text(path)
        if text is not None:
            assert not _shingles(text) & theirs, f"{path.relative_to(REPO)}: holds lines of an upstream library"


def test_the_wheel_carries_only_code(tmp_path):
    src = tmp_path / "src"
    for path in tracked():
        dest = src / path.relative_to(REPO)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, dest)
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                        "-w", str(tmp_path / "wheel"), str(src)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    (wheel,) = (tmp_path / "wheel").glob("*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert any(n.endswith("tempering/tasks/terminal/catalog.py") for n in names)
    code = re.compile(r"(\.py|\.c|\.h)$|^tempering/view/static/|^tempering/sandbox/toolchain/requirements\.txt$"
                      r"|\.dist-info/")
    assert [n for n in names if not code.search(n)] == []
    assert not [n for n in names if n.startswith("data/") or "/tasks/" in n and n.endswith(("task.toml", ".md"))]


def test_test_files_have_distinct_names():
    """pytest imports test files by their base name (tests/ has no packages): two files of one
    name pass on their own and fail a clean clone's collection ("import file mismatch")."""
    files = subprocess.run(["git", "ls-files", "tests"], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    names = [Path(f).name for f in files if Path(f).suffix == ".py" and Path(f).name != "conftest.py"]
    assert sorted({n for n in names if names.count(n) > 1}) == []
