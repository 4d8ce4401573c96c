"""Tiny Harbor task folders written by the tests, in the layout and with the verifier script
Terminal-Bench 2 tasks use (apt-get, the uv installer, uvx with pinned pytest and --ctrf)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tempering.sandbox.toolchain import MANIFEST, default_dir

needs_sandbox = pytest.mark.skipif(shutil.which("bwrap") is None or not (default_dir() / MANIFEST).is_file(),
                                   reason="needs bubblewrap and the toolchain (scripts/setup.sh)")

TB_TEST_SH = """#!/bin/bash
apt-get update
apt-get install -y curl
curl -LsSf https://astral.sh/uv/0.9.5/install.sh | sh
source $HOME/.local/bin/env
uvx -p 3.13 -w pytest==8.4.1 -w pytest-json-ctrf==0.3.5 pytest --ctrf /logs/verifier/ctrf.json /tests/test_outputs.py -rA
if [ $? -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
"""
# The same verdict through `python -m pytest` from the workspace, which puts it on sys.path.
MODULE_TEST_SH = TB_TEST_SH.replace("uvx -p 3.13 -w pytest==8.4.1 -w pytest-json-ctrf==0.3.5 pytest", "python -m pytest")

# The task: answer.py must print 42; the tests run it, so code from the workspace runs at verification.
ANSWER_TESTS = '''import subprocess
from pathlib import Path

def test_answer_prints_42():
    out = subprocess.run(["python3", "/app/answer.py"], capture_output=True, text=True, timeout=30)
    assert out.stdout.strip() == "42"

def test_notes_kept():
    assert Path("/app/notes.txt").read_text() == "from the image\\n"
'''
ORACLE = "#!/bin/bash\necho 'print(6 * 7)' > answer.py\n"
DOCKERFILE = """FROM python:3.13-slim
WORKDIR /app
COPY notes.txt ./
RUN echo 'print(0)' > answer.py
"""


def make_task(root: Path, name: str = "answer", dockerfile: str = DOCKERFILE, test_sh: str = TB_TEST_SH,
              tests: str = ANSWER_TESTS, solve: str | None = ORACLE, toml: str = "", context: dict | None = None) -> Path:
    """Write a task folder under `root` and return it."""
    task = root / name
    (task / "environment").mkdir(parents=True)
    (task / "tests").mkdir()
    (task / "instruction.md").write_text("Make /app/answer.py print 42.\n")
    (task / "task.toml").write_text('version = "1.0"\n[verifier]\ntimeout_sec = 60.0\n[agent]\ntimeout_sec = 60.0\n'
                                     + toml)
    (task / "environment" / "Dockerfile").write_text(dockerfile)
    for rel, text in ({"notes.txt": "from the image\n"} | (context or {})).items():
        (task / "environment" / rel).parent.mkdir(parents=True, exist_ok=True)
        (task / "environment" / rel).write_text(text)
    (task / "tests" / "test.sh").write_text(test_sh)
    (task / "tests" / "test_outputs.py").write_text(tests)
    if solve is not None:
        (task / "solution").mkdir()
        (task / "solution" / "solve.sh").write_text(solve)
    return task


def make_wheel(folder: Path, version: str) -> Path:
    """A tiny pure-Python wheel, tempering-tiny VERSION, written by hand into `folder`: its module
    says its version, a console script prints it, and a .pth file puts a folder of its own on
    sys.path (its `tiny_extra` module imports only when .pth files are read)."""
    import base64
    import hashlib
    import zipfile

    dist = f"tempering_tiny-{version}.dist-info"
    files = {
        "tempering_tiny/__init__.py": f"VERSION = {version!r}\n\ndef main():\n    print(VERSION)\n",
        "tempering_tiny_extra/tiny_extra.py": "FOUND = True\n",
        "tempering_tiny.pth": "tempering_tiny_extra\n",
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: tempering-tiny\nVersion: {version}\n",
        f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: tempering-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        f"{dist}/entry_points.txt": "[console_scripts]\ntiny-version = tempering_tiny:main\n",
    }
    record = [f"{name},sha256={base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b'=').decode()},"
              f"{len(text.encode())}" for name, text in files.items()]
    files[f"{dist}/RECORD"] = "\n".join(record + [f"{dist}/RECORD,,"]) + "\n"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"tempering_tiny-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        for name, text in files.items():
            z.writestr(name, text)
    return path


def make_sdist(folder: Path, escape_to: list[str]) -> Path:
    """A source-only package, tempering-src 1.0, whose setup.py (run where it is built) tries to
    write each of `escape_to`, host paths a build in the sandbox cannot reach."""
    import io
    import tarfile

    setup = ("from setuptools import setup\n"
             f"for path in {escape_to!r}:\n    try:\n        open(path, 'w').write('escaped')\n"
             "    except OSError:\n        pass\n"
             "setup(name='tempering-src', version='1.0', py_modules=['tempering_src'])\n")
    files = {"setup.py": setup, "tempering_src.py": "SOURCE_BUILT = True\n",
             "PKG-INFO": "Metadata-Version: 2.1\nName: tempering-src\nVersion: 1.0\n"}
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "tempering-src-1.0.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for name, text in files.items():
            info = tarfile.TarInfo(f"tempering-src-1.0/{name}")
            info.size = len(text.encode())
            tar.addfile(info, io.BytesIO(text.encode()))
    return path
