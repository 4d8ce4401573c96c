"""The read-only toolchain every sandbox session sees at /opt/toolchain, and what it provides.

A folder built by `build.py` (scripts/setup.sh): Python packages for the sandbox's own python3
(pytest and its plugins), `python`/`python3`/`pytest` that run them with a controlled import
path, and offline shims for the installers test scripts call (apt-get, pip, uv, uvx: they
succeed for what is present and fail, naming it, for what is not). Its manifest.json lists
what the sandbox offers: Python packages with versions (the toolchain's and the system's; a
task's others come in a package layer, `sandbox.layers`), the Debian packages of debian.txt
that this machine has (a fixed list, so a folder runs or not whatever else is installed),
and commands. It lives in the cache (`default_dir()`: `tempering.cache`, public to the
sandbox's uid whatever the checkout's parents are). `locate` reads the one config key,
`sandbox.toolchain`; `Toolchain.missing` says which of a task's needs are not met and
`satisfies` whether a requirement is; `session_env` and `home` are what a session's commands
get. It builds nothing (`build`) and mounts nothing (the backend binds `root`).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Mapping

from tempering import cache
from tempering.sandbox.toolchain.shims import needless_apt, normalize, requirement_name, satisfies

if TYPE_CHECKING:
    from tempering.sandbox.workspace import Workspace

MANIFEST = "manifest.json"
PATH_DIRS = ("/usr/local/bin", "/usr/bin", "/bin")  # the sandbox's PATH after the toolchain's bin/


class ToolchainError(ValueError):
    """`sandbox.toolchain` names a folder that is not a usable toolchain; says why."""


@dataclass(frozen=True)
class Toolchain:
    root: Path  # on the host
    python: str = ""  # the guest interpreter's version it was built for, e.g. "3.11"
    python_packages: Mapping[str, str] = field(default_factory=dict)  # normalised name -> version
    apt_packages: frozenset[str] = frozenset()
    commands: frozenset[str] = frozenset()

    @classmethod
    def load(cls, root: str | Path) -> "Toolchain":
        root = Path(root)
        try:
            m = json.loads((root / MANIFEST).read_text())
            return cls(root, str(m["python"]), {normalize(k): v for k, v in m["python_packages"].items()},
                       frozenset(m["apt_packages"]), frozenset(m["commands"]))
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise ToolchainError(f"sandbox.toolchain: {root} has no readable {MANIFEST} ({e}); "
                                 "build it with scripts/setup.sh") from None

    def satisfies(self, requirement: str) -> bool:
        """Whether the toolchain's Python packages meet `requirement` ("pytest==8.4.1", "six")."""
        name = requirement_name(requirement)
        return name is not None and satisfies(requirement, self.python_packages.get(normalize(name)))

    def missing(self, python: Iterable[str] = (), apt: Iterable[str] = (), commands: Iterable[str] = ()) -> list[str]:
        """Each need that is not met, as a phrase ("python package numpy==2.3.0", "command gcc"),
        each package named once. A Debian package is met when debian.txt lists it and this
        machine has it, or when no sandbox needs it (`shims.needless_apt`: headers, editors)."""
        out = [f"python package {p}" for p in python if not self.satisfies(p)]
        out += [f"Debian package {p}" for p in apt if p not in self.apt_packages and not needless_apt(p)]
        out += [f"command {c}" for c in commands if c not in self.commands]
        return list(dict.fromkeys(out))

    def session_env(self, mount: str, layer: str | None = None) -> dict[str, str]:
        """The environment a session's commands get with the toolchain seen at `mount` and, if
        any, a package layer at `layer` (its packages before the toolchain's, its console
        scripts after the toolchain's shims)."""
        bins, libs = [f"{mount}/bin"], [f"{mount}/lib"]
        if layer:
            bins.append(f"{layer}/bin")
            libs.insert(0, f"{layer}/lib")
        return {"PATH": ":".join((*bins, *PATH_DIRS)), "PYTHONPATH": ":".join(libs), "PYTHONNOUSERSITE": "1"}

    def home(self) -> "Workspace":
        """The home directory's skeleton (.local/bin/env, which test scripts `source` after
        running the uv installer)."""
        from tempering.sandbox.workspace import Workspace

        return Workspace.from_dir(self.root / "home")


def make_public(root: Path) -> None:
    """The sandbox runs as an unprivileged host uid: everything under `root` must be
    world-readable (and its folders searchable)."""
    for dirpath, dirnames, filenames in os.walk(root):
        os.chmod(dirpath, 0o755)
        for name in filenames:
            path = os.path.join(dirpath, name)
            if not os.path.islink(path):
                os.chmod(path, os.stat(path).st_mode | 0o444)


def default_dir() -> Path:
    """Where scripts/setup.sh builds the toolchain and "auto" looks for it."""
    return cache.root() / "toolchain"


def locate(setting: str) -> Toolchain | None:
    """The toolchain `sandbox.toolchain` names: "auto" (the default) is `default_dir()` when it
    has been built, else none; "" is none; anything else a folder that must hold a toolchain.
    The sandbox runs as an unprivileged host uid, so the folder must be public (ToolchainError)."""
    if setting == "":
        return None
    path = default_dir() if setting == "auto" else Path(setting)
    if setting == "auto" and not (path / MANIFEST).is_file():
        return None
    tc = Toolchain.load(path)
    try:
        cache.check_public(tc.root, "sandbox.toolchain")
    except cache.CacheError as e:
        raise ToolchainError(str(e)) from None
    return tc


