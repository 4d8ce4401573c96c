"""The read-only toolchain: the offline installer shims against a hand-written manifest, the
folder's location and permissions, an idempotent rebuild without the network, and what a
session sees of it (the real toolchain, built by scripts/setup.sh)."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from sandbox_helpers import needs_bwrap
from tempering.sandbox import SessionSpec, Workspace
from tempering.sandbox.toolchain import MANIFEST, Toolchain, ToolchainError, default_dir, locate
from tempering.sandbox.toolchain import build as toolchain_build

built = pytest.mark.skipif(not (default_dir() / MANIFEST).is_file(),
                           reason="no toolchain built (scripts/setup.sh builds .toolchain)")


@pytest.fixture
def fake_root(tmp_path):
    """A toolchain folder with the real shims and a manifest listing pytest and bash only."""
    shutil.copy(toolchain_build.HERE / "shims.py", tmp_path / "shims.py")
    (tmp_path / "shims.py").chmod(0o755)
    (tmp_path / "bin").mkdir()
    for name in ("pip", "apt-get", "uvx", "uv"):
        (tmp_path / "bin" / name).symlink_to("../shims.py")
    (tmp_path / "bin" / "pytest").write_text("#!/bin/sh\necho \"pytest got: $*\"\n")
    (tmp_path / "bin" / "pytest").chmod(0o755)
    (tmp_path / MANIFEST).write_text(json.dumps({"python": "3.11", "python_packages": {"pytest": "8.4.1",
                                                 "pytest-json-ctrf": "0.3.5"}, "apt_packages": ["bash"],
                                                 "commands": ["bash", "pytest"]}))
    return tmp_path


def shim(root, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(root / "bin" / argv[0]), *argv[1:]], capture_output=True, text=True, cwd=root)


def test_installer_shims_succeed_for_what_is_present_and_name_what_is_not(fake_root):
    assert shim(fake_root, "pip", "install", "-q", "pytest==8.4.1", "pytest_json_ctrf").returncode == 0
    r = shim(fake_root, "pip", "install", "pytest", "numpy>=2", "--index-url", "http://x")
    assert r.returncode == 1 and "numpy>=2" in r.stderr and "pytest," not in r.stderr
    (fake_root / "req.txt").write_text("pytest\n# a comment\nrequests==2.0\n")
    r = shim(fake_root, "pip", "install", "-r", "req.txt")
    assert r.returncode == 1 and "requests==2.0" in r.stderr
    assert shim(fake_root, "apt-get", "update").returncode == 0
    assert shim(fake_root, "apt-get", "install", "-y", "--no-install-recommends", "bash=5.2").returncode == 0
    r = shim(fake_root, "apt-get", "install", "-y", "bash", "no-such-package")
    assert r.returncode == 100 and "Unable to locate package no-such-package" in r.stderr


def test_uvx_drops_its_package_options_and_runs_the_command(fake_root):
    r = shim(fake_root, "uvx", "-p", "3.13", "-w", "pytest==8.4.1", "--with=pytest-json-ctrf==0.3.5", "--python=3.13",
             "pytest", "--ctrf", "/logs/verifier/ctrf.json", "/tests/test_outputs.py", "-rA")
    assert r.returncode == 0 and r.stdout == "pytest got: --ctrf /logs/verifier/ctrf.json /tests/test_outputs.py -rA\n", r
    r = shim(fake_root, "uvx", "--with", "pandas", "pytest")
    assert r.returncode == 1 and "pandas" in r.stderr
    assert shim(fake_root, "uv", "run", "-w", "pytest", "pytest", "-q").stdout == "pytest got: -q\n"
    assert shim(fake_root, "uv", "pip", "install", "pytest").returncode == 0


def test_locate_reads_the_one_config_key(tmp_path):
    assert locate("") is None
    with pytest.raises(ToolchainError, match="sandbox.toolchain: .* has no readable manifest.json"):
        locate(str(tmp_path))
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    (private / MANIFEST).write_text(json.dumps({"python": "3.11", "python_packages": {}, "apt_packages": [],
                                                "commands": []}))
    with pytest.raises(ToolchainError, match="not readable by other users"):
        locate(str(private))


@built
def test_a_built_toolchain_rebuilds_without_the_network(tmp_path):
    dest = tmp_path / "tc"
    shutil.copytree(default_dir(), dest, symlinks=True)
    (dest / "bin" / "pip").unlink()  # a shim gone missing is put back
    assert "up to date" in toolchain_build.build(dest, "/usr/bin/python3")
    assert (dest / "bin" / "pip").is_symlink() and not (tmp_path / "tc.new").exists()
    tc = Toolchain.load(dest)  # (not `locate`: pytest's tmp_path is private, which locate refuses)
    assert "pytest" in tc.python_packages and "pytest" in tc.commands and "bash" in tc.apt_packages
    assert tc.missing(python=["pytest", "no-such-package"], commands=["git", "no-such-command"]) == [
        "python package no-such-package", "command no-such-command"]


@built
@needs_bwrap
def test_sessions_see_the_toolchain(sandbox):
    tests = Workspace.from_files({"test_x.py": b"def test_ok():\n    assert True\n"})
    with sandbox.open_session(SessionSpec(workdir="/app", workspace=tests)) as s:
        script = ("set -e; source $HOME/.local/bin/env; apt-get update -q; apt-get install -y git; "
                  "pip install pytest; git --version >/dev/null; python --version; "
                  "uvx -p 3.13 -w pytest==8.4.1 -w pytest-json-ctrf==0.3.5 pytest -q --ctrf /tmp/c.json test_x.py; "
                  "python3 -c 'import json; print(json.load(open(\"/tmp/c.json\"))[\"results\"][\"summary\"][\"passed\"])'; "
                  "python -m pytest -q -p no:cacheprovider test_x.py; apt-get install -y no-such-package")
        r = s.run(("bash", "-c", script), time_limit_s=60)
    assert r.exit_code == 100 and "Unable to locate package no-such-package" in r.stderr, r
    assert "Python 3" in r.stdout and r.stdout.count("1 passed") == 2 and "\n1\n" in r.stdout, r.stdout
