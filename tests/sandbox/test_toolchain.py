"""The read-only toolchain: the offline installer shims against a hand-written manifest, the
folder's location and permissions, an idempotent rebuild without the network, and what a
session sees of it (the real toolchain, built by scripts/setup.sh)."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from sandbox_helpers import needs_bwrap
from tempering.sandbox import SessionSpec, Workspace, layers
from tempering.sandbox.toolchain import MANIFEST, Toolchain, ToolchainError, default_dir, locate
from tempering.sandbox.toolchain import build as toolchain_build
from tempering.sandbox.toolchain import shims

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
    inode = dest.stat().st_ino  # built again with nothing changed: the folder itself is kept
    assert toolchain_build.build(dest, "/usr/bin/python3").endswith("unchanged")
    assert dest.stat().st_ino == inode and not (tmp_path / "tc.new").exists()
    built_manifest = (dest / MANIFEST).read_text()  # the machine changed since (an apt install): a command more
    (dest / MANIFEST).write_text(json.dumps(json.loads(built_manifest) | {"commands": ["no-such-command-yet"]}))
    assert toolchain_build.build(dest, "/usr/bin/python3").endswith("manifest refreshed")
    assert dest.stat().st_ino == inode and (dest / MANIFEST).read_text() == built_manifest
    tc = Toolchain.load(dest)  # (not `locate`: pytest's tmp_path is private, which locate refuses)
    assert "pytest" in tc.python_packages and "pytest" in tc.commands and "bash" in tc.apt_packages
    assert tc.missing(python=["pytest", "no-such-package"], commands=["git", "no-such-command"]) == [
        "python package no-such-package", "command no-such-command"]
    assert "tempering.sandbox" not in (dest / "lib" / "sitecustomize.py").read_text()  # our start-up file, standalone


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


@pytest.mark.parametrize("spec, version, met", [
    ("numpy==2.3.0", "2.3.0", True), ("numpy==2.3.0", "2.1.2", False), ("numpy==2.3", "2.3.0", True),
    ("numpy", "0.1", True), ("numpy", None, False), ("numpy>=2,<3", "2.9.1", True), ("numpy>=2,<3", "3.0", False),
    ("pkg~=3.3.0", "3.3.5", True), ("pkg~=3.3.0", "3.4.0", False), ("pkg~=3.3", "3.9", True),
    ("pkg==3.*", "3.3.5", True), ("pkg!=3.3.5", "3.3.5", False), ("pkg>=1.0", "1.0rc1", False),
    ("pkg<1.0", "1.0.dev2", True), ("pkg>1.0", "1.0.post1", True),
    ("Pkg[extra] == 1.0 ; python_version > '3'", "1.0", True),
])
def test_pins_are_compared_with_the_version_installed(spec, version, met):
    assert shims.satisfies(spec, version) is met


def test_shims_refuse_a_pin_the_installed_version_does_not_meet(fake_root):
    r = shim(fake_root, "pip", "install", "pytest==8.4.2")
    assert r.returncode == 1 and "pytest==8.4.2 (8.4.1 is installed)" in r.stderr, r.stderr
    assert shim(fake_root, "uvx", "-w", "pytest>=8,<9", "pytest").returncode == 0


def test_debian_packages_are_judged_by_the_fixed_list_not_the_machine(fake_root):
    """`bash` is offered (the manifest's fixed list); headers, editors and the like need no
    offer; a package this machine happens to have installed (bubblewrap) is still refused."""
    assert shim(fake_root, "apt-get", "install", "-y", "bash", "nano", "libhdf5-dev", "pkg-config").returncode == 0
    r = shim(fake_root, "apt-get", "install", "-y", "bubblewrap")
    assert r.returncode == 100 and "Unable to locate package bubblewrap" in r.stderr
    tc = Toolchain.load(fake_root)
    assert tc.missing(apt=["bash", "vim", "libssl-dev", "bubblewrap", "bubblewrap"]) == ["Debian package bubblewrap"]
    assert tc.satisfies("pytest>=8") and not tc.satisfies("pytest==9.0") and not tc.satisfies("./local")


def test_layers_are_planned_from_what_the_toolchain_lacks(fake_root):
    tc = Toolchain.load(fake_root)
    assert layers.plan(["pytest==8.4.1", "pytest_json_ctrf"], tc) is None  # met by the toolchain
    a = layers.plan(["numpy==2.1.2", "Pytest==8.4.2", "numpy==2.3.0", "."], tc)
    assert a.requirements == ("numpy==2.3.0", "pytest==8.4.2") and a.python == "3.11"  # the later pin wins
    assert layers.plan(["pytest==8.4.2", "numpy == 2.3.0"], tc).name == a.name  # the same set: the same layer
    other = Toolchain(tc.root, "3.12", tc.python_packages)
    assert layers.plan(["numpy==2.3.0", "pytest==8.4.2"], other).name != a.name  # another Python: another layer


@built
@needs_bwrap
def test_pytest_runs_multiprocessing_spawn_children(sandbox):
    """The toolchain's pytest entry point runs pytest only as __main__: a spawned child imports it
    again (as __mp_main__) and must get the import path, not a second pytest run."""
    tests = Workspace.from_files({"test_spawn.py": b"import multiprocessing as mp\n\n\ndef square(x):\n"
                                  b"    return x * x\n\n\ndef test_pool():\n"
                                  b"    with mp.get_context('spawn').Pool(2) as pool:\n"
                                  b"        assert pool.map(square, range(4)) == [0, 1, 4, 9]\n"})
    with sandbox.open_session(SessionSpec(workdir="/app", workspace=tests)) as s:
        r = s.run(("pytest", "-q", "-p", "no:cacheprovider", "test_spawn.py"), time_limit_s=60, memory_mb=512)
    assert r.ok and "1 passed" in r.stdout and r.stdout.count("passed") == 1, r.stdout + r.stderr
