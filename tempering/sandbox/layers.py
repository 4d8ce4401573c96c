"""Package layers: a task's own Python packages, resolved on the host into a read-only folder.

A layer is one set of requirements ("numpy==2.3.0", "scipy") installed from PyPI by pip for
the sandbox's python3 (wheels only, `--target`, the guest's Python version; a package PyPI
has only as source is built into a wheel inside the sandbox first, `wheels`), in the cache's
`layers/` folder (`tempering.cache`) under a name that is the sha256 of its Python version
and sorted requirements: tasks that ask the same share it, and a built layer never changes.
A session that names it (`SessionSpec.layer`) sees it read-only at /opt/layer: lib/ on the
import path before the toolchain's, bin/ with its console scripts, manifest.json with what it
holds (the installer shims read it); a file it shares with a built layer is one file on disk
(a hard link). `plan` decides the layer a set of requirements needs
(None when the toolchain meets them all); `build` makes it, needing the network once: offline
with no earlier build it raises LayerError, one line naming the packages. Nothing here runs
in the sandbox; the sandbox binds the folder (`bwrap.LAYERS`) and a job's init its one layer.
"""

from __future__ import annotations

import filecmp
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import threading
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Iterable

from tempering import cache
from tempering.sandbox import wheels
from tempering.sandbox.request import Sandbox
from tempering.sandbox.toolchain import MANIFEST, Toolchain, make_public, normalize
from tempering.sandbox.toolchain.shims import requirement_name

PIP_TIMEOUT_S = 1800.0  # one layer's pip run (a CUDA build of torch is gigabytes)
_SOURCE_ROUNDS = 4  # source packages built for one layer, at most
_NO_WHEEL = re.compile(r"No matching distribution found for (\S+)")
_SCRIPT = """#!/usr/bin/python3
# {name}: a console script of a package layer (pip's own would name the host's interpreter)
import sys
from {module} import {head}
if __name__ == "__main__":
    sys.argv[0] = {name!r}
    sys.exit({call}())
"""
_locks: dict[str, threading.Lock] = {}
_locks_lock = threading.Lock()


class LayerError(OSError):
    """A layer could not be built (offline, no wheel for the sandbox's Python, a conflict);
    the message is one line naming the requirements and pip's own last words. `missing` is the
    requirement pip found no wheel of, when that was why."""

    def __init__(self, message: str, missing: str = "") -> None:
        super().__init__(message)
        self.missing = missing


@dataclass(frozen=True)
class Layer:
    name: str  # the sha256 of `python` and `requirements`: its folder's name
    requirements: tuple[str, ...]  # sorted, one per package
    python: str  # the guest's Python version it is built for, e.g. "3.11"
    root: Path  # on the host

    @property
    def built(self) -> bool:
        return (self.root / MANIFEST).is_file()


def folder() -> Path:
    """The cache's folder of layers, public to the sandbox's uid (cache.CacheError if not)."""
    return cache.folder("layers", public=True)


def plan(requirements: Iterable[str], toolchain: Toolchain) -> Layer | None:
    """The layer `requirements` need beyond what `toolchain` offers: one requirement per package
    (a later one replaces an earlier one of the same name, as a later `pip install` would), those
    the toolchain meets left out, local paths and URLs too (nothing is built from them). Names
    are written as PEP 503 compares them, so that "Foo_Bar==1" and "foo-bar==1" share a layer.
    None when nothing is left."""
    wanted: dict[str, str] = {}
    for spec in requirements:
        name = requirement_name(spec)
        if name is not None:
            version, semicolon, marker = spec.strip()[len(name):].partition(";")
            marker = f"; {marker.strip()}" if semicolon else ""
            wanted[normalize(name)] = normalize(name) + "".join(version.split()) + marker
    left = tuple(sorted(spec for spec in wanted.values() if not toolchain.satisfies(spec)))
    if not left:
        return None
    key = json.dumps({"python": toolchain.python, "requirements": left}, sort_keys=True)
    name = hashlib.sha256(key.encode()).hexdigest()
    return Layer(name, left, toolchain.python, cache.root() / "layers" / name)


def build(layer: Layer, sandbox: Sandbox | None = None, timeout_s: float = PIP_TIMEOUT_S) -> Layer:
    """Install `layer` unless it is built already; with a `sandbox`, what PyPI has only as
    source is built into wheels there first. Built beside its folder and renamed into place,
    so no sandbox sees half a layer; two builders of one layer both finish, one keeps its copy.
    Raises LayerError."""
    if layer.built:
        return layer
    with _lock(layer.name):
        if layer.built:
            return layer
        folder()
        new = layer.root.with_name(f".{layer.name}.{os.getpid()}.new")
        shutil.rmtree(new, ignore_errors=True)
        try:
            _install(new, layer, sandbox, timeout_s)
            _write_scripts(new / "lib", new / "bin")
            manifest = {"format": 1, "python": layer.python, "requirements": list(layer.requirements),
                        "python_packages": packages(new / "lib")}
            (new / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True))
            make_public(new)
            _share(new)
            try:
                new.rename(layer.root)
            except OSError:
                if not layer.built:  # not another builder's copy in place: a real failure
                    raise
        finally:
            shutil.rmtree(new, ignore_errors=True)
    return layer


def _install(new: Path, layer: Layer, sandbox: Sandbox | None, timeout_s: float) -> None:
    """pip install the layer's requirements into new/lib, building in `sandbox` a wheel of each
    that pip finds none of (and of theirs, up to a few rounds), kept in new/wheels meanwhile."""
    built, tried = new / "wheels", set()
    for _ in range(_SOURCE_ROUNDS):
        try:
            extra = ["--find-links", str(built)] if built.is_dir() else []
            pip_install(new / "lib", layer.python, [*extra, *layer.requirements], timeout_s)
            break
        except LayerError as e:
            if sandbox is None or not e.missing or e.missing in tried:
                raise
            tried.add(e.missing)
            try:
                name, data = wheels.build(sandbox, *wheels.source(e.missing))
            except wheels.WheelError as why:
                raise LayerError(f"{e} ({why})") from None
            built.mkdir(parents=True, exist_ok=True)
            (built / name).write_bytes(data)
    else:
        raise LayerError(f"pip install {' '.join(layer.requirements)}: more than {_SOURCE_ROUNDS} source packages")
    shutil.rmtree(built, ignore_errors=True)


def pip_install(target: Path, version: str, args: list[str], timeout_s: float = PIP_TIMEOUT_S) -> None:
    """pip install `args` into `target`: wheels only (installing one runs none of its code; building
    a source package would, as root on the host: `wheels` builds them in the sandbox), for the
    guest's Python `version` (the host's pip may run another patch release). Raises LayerError
    with pip's last lines."""
    cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-input",
           "--target", str(target), "--python-version", version, "--implementation", "cp", "--only-binary=:all:",
           *args]
    what = " ".join(args)
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise LayerError(f"pip install {what}: not done in {timeout_s:g} s") from None
    if r.returncode != 0:
        tail = [line.strip() for line in (r.stderr or r.stdout).strip().splitlines() if line.strip()][-2:]
        missing = _NO_WHEEL.search(r.stderr or r.stdout)
        raise LayerError(f"pip could not install {what} for Python {version} from wheels (offline, or PyPI has "
                         f"no wheel of it): {' | '.join(tail)}", missing=missing.group(1) if missing else "")
    shutil.rmtree(target / "bin", ignore_errors=True)  # scripts for the host's interpreter: ours are in bin/


def packages(lib: Path) -> dict[str, str]:
    """The distributions installed in `lib`: name -> version."""
    found = {d.metadata["Name"]: d.version for d in metadata.distributions(path=[str(lib)]) if d.metadata["Name"]}
    return dict(sorted(found.items()))


def _share(new: Path) -> None:
    """Hard-link each file of the `new` layer to the same file (same path, same bytes) of a
    built one, so that layers holding the same big packages (torch: gigabytes) share them on
    disk. Safe because a built layer never changes; its files' modes are alike (`make_public`)."""
    others = [p for p in new.parent.iterdir() if p != new and (p / MANIFEST).is_file()]
    if not others:
        return
    for path in new.rglob("*"):
        if not path.is_file() or path.is_symlink() or path.name == MANIFEST:
            continue
        rel, size = path.relative_to(new), path.stat().st_size
        for other in others:
            twin = other / rel
            if twin.is_file() and not twin.is_symlink() and twin.stat().st_size == size \
                    and filecmp.cmp(path, twin, shallow=False):
                tmp = path.with_name(path.name + ".link")
                os.link(twin, tmp)
                os.replace(tmp, path)
                break


def _write_scripts(lib: Path, bin_: Path) -> None:
    """bin/NAME for each console script of the layer's packages, run by the sandbox's python3
    (the layer's lib/ is on its PYTHONPATH)."""
    bin_.mkdir(parents=True)
    for dist in metadata.distributions(path=[str(lib)]):
        for ep in dist.entry_points.select(group="console_scripts"):
            module, _, attr = ep.value.partition(":")
            attr = attr.split("[")[0].strip()
            if not module.strip() or not attr or "/" in ep.name or ep.name.startswith("."):
                continue
            head = attr.split(".")[0]
            script = bin_ / ep.name
            script.write_text(_SCRIPT.format(name=ep.name, module=module.strip(), head=head, call=attr))
            script.chmod(0o755)


def _lock(name: str) -> threading.Lock:
    with _locks_lock:
        return _locks.setdefault(name, threading.Lock())
