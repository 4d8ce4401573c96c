"""Package layers inside the sandbox, judged from the host: a session sees its own layer
read-only at /opt/layer (its packages imported before the toolchain's, its .pth files read),
cannot change it, and sees neither the folder of all layers nor another task's layer; a name
that is not a layer is refused, one not built is a sandbox error naming it."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import uuid

import pytest

from sandbox_helpers import needs_bwrap
from tempering.records import ExecReason
from tempering.sandbox import ExecRequest, SessionSpec, Workspace, layers, wheels
from tempering.sandbox.toolchain import MANIFEST, default_dir
from tempering.sandbox.toolchain import build as toolchain_build

pytestmark = [needs_bwrap, pytest.mark.skipif(not (default_dir() / MANIFEST).is_file(),
                                              reason="no toolchain built (scripts/setup.sh), so no layers")]


def make_layer(marker: str) -> str:
    """A built layer made by hand: a module, a .pth file adding a folder, a manifest."""
    name = hashlib.sha256(f"test-layer-{marker}-{uuid.uuid4()}".encode()).hexdigest()
    root = layers.folder() / name
    (root / "lib" / "extra").mkdir(parents=True)
    (root / "lib" / f"layer_{marker}.py").write_text(f"MARK = {marker!r}\n")
    (root / "lib" / "extra" / f"via_pth_{marker}.py").write_text("OK = True\n")
    (root / "lib" / f"{marker}.pth").write_text("extra\n")
    (root / "bin").mkdir()
    (root / MANIFEST).write_text(json.dumps({"format": 1, "python": "3.11", "requirements": [],
                                             "python_packages": {f"layer-{marker}": "1.0"}}))
    layers.make_public(root)
    return name


@pytest.fixture
def two_layers():
    names = make_layer("a"), make_layer("b")
    yield names
    for name in names:
        shutil.rmtree(layers.folder() / name, ignore_errors=True)


def digest(name: str) -> str:
    root = layers.folder() / name
    return hashlib.sha256(b"".join(p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file())).hexdigest()


def test_a_session_sees_its_layer_alone_and_cannot_change_it(sandbox, two_layers):
    mine, other = two_layers
    before = digest(mine)
    tests = Workspace.from_files({"test_l.py": b"import layer_a, via_pth_a\n\ndef test_it():\n"
                                  b"    assert layer_a.MARK == 'a' and via_pth_a.OK\n"})
    script = f"""
python3 -c 'import layer_a, via_pth_a; print(layer_a.MARK, via_pth_a.OK)'
pytest -q -p no:cacheprovider test_l.py | tail -1
pip freeze | grep layer-
touch /opt/layer/lib/new.py 2>&1 | grep -c 'Read-only file system'
chmod 777 /opt/layer/lib/layer_a.py 2>&1 | grep -c 'Read-only file system'
ls -a / | grep -c layers
ls /.layers/{other} 2>&1 | grep -c 'No such file'
python3 -c 'import layer_b' 2>&1 | grep -c ModuleNotFoundError
"""
    with sandbox.open_session(SessionSpec(workdir="/app", workspace=tests, layer=mine)) as s:
        r = s.run(("bash", "-c", script), time_limit_s=30)
    assert r.stdout.split("\n") == ["a True", "1 passed in " + r.stdout.split("1 passed in ")[1].split("\n")[0],
                                    "layer-a==1.0", "1", "1", "0", "1", "1", ""], r.stdout + r.stderr
    assert digest(mine) == before


def test_a_bad_or_missing_layer_is_refused(sandbox):
    with pytest.raises(ValueError, match="not a layer's name"):
        ExecRequest(command=("true",), layer="../../etc")
    absent = hashlib.sha256(b"never built").hexdigest()
    with sandbox.open_session(SessionSpec(workdir="/app", layer=absent)) as s:
        r = s.run(("true",))
    assert r.reason == ExecReason.SANDBOX_ERROR and absent in r.error, r


def test_a_source_archive_is_found_locally_and_refused_when_none_fits(tmp_path, monkeypatch):
    for version in ("1.0", "1.2", "2.0"):
        (tmp_path / f"Some_Pkg-{version}.tar.gz").write_bytes(version.encode())
    (tmp_path / "other-1.5.tar.gz").write_bytes(b"x")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path))
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    assert wheels.source("some-pkg<2") == ("Some_Pkg-1.2.tar.gz", b"1.2")
    with pytest.raises(wheels.WheelError, match="no source archive of it either"):
        wheels.source("some-pkg>3")


def test_setup_run_beside_a_live_sandbox_leaves_its_layers_working(sandbox, two_layers):
    """scripts/setup.sh run while a sandbox is up (a demo beside the test suite) once replaced
    the toolchain folder the sandbox had bound, and its jobs with a layer failed to mount it;
    so it did when the machine had changed since the last build (the suite's apt packages
    installed after set-up), which the manifest as built then stands for here."""
    mine, _ = two_layers
    with sandbox.open_session(SessionSpec(workdir="/app", layer=mine)) as s:
        assert s.run(("python3", "-c", "import layer_a"), time_limit_s=30).exit_code == 0
    manifest = default_dir() / MANIFEST
    earlier = json.loads(manifest.read_text())
    earlier["commands"].append("a-command-since-removed")
    (default_dir() / "manifest.earlier").write_text(json.dumps(earlier, indent=1, sort_keys=True))
    os.replace(default_dir() / "manifest.earlier", manifest)  # whole, for other tests reading it now
    toolchain_build.main([])
    assert "a-command-since-removed" not in json.loads(manifest.read_text())["commands"]  # refreshed
    with sandbox.open_session(SessionSpec(workdir="/app", layer=mine)) as s:
        r = s.run(("bash", "-c", "python3 -c 'import layer_a' && pytest --version"), time_limit_s=30)
    assert r.exit_code == 0, r
