"""The read-only toolchain every sandbox session sees at /opt/toolchain, and what it provides.

A folder built by `build.py` (scripts/setup.sh): Python packages for the sandbox's own python3
(pytest and what tasks need), `python`/`python3`/`pytest` that run them with a controlled import
path, and offline shims for the installers test scripts call (apt-get, pip, uv, uvx: they
succeed for what is present and fail, naming it, for what is not). Its manifest.json lists
what the sandbox offers: Python packages (the toolchain's and the system's), Debian packages
and commands. It lives in the cache (`default_dir()`: `tempering.cache`, public to the
sandbox's uid whatever the checkout's parents are). `locate` reads the one config key,
`sandbox.toolchain`; `Toolchain.missing`
says which of a task's needs are not met; `session_env` and `home` are what a session's
commands get. It builds nothing (`build`) and mounts nothing (the backend binds `root`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Mapping

from tempering import cache

if TYPE_CHECKING:
    from tempering.sandbox.workspace import Workspace

MANIFEST = "manifest.json"
PATH_DIRS = ("/usr/local/bin", "/usr/bin", "/bin")  # the sandbox's PATH after the toolchain's bin/


class ToolchainError(ValueError):
    """`sandbox.toolchain` names a folder that is not a usable toolchain; says why."""


def normalize(name: str) -> str:
    """A Python package name as PEP 503 compares them."""
    return re.sub(r"[-_.]+", "-", name).lower()


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

    def missing(self, python: Iterable[str] = (), apt: Iterable[str] = (), commands: Iterable[str] = ()) -> list[str]:
        """Each need that is not met, as a phrase ("python package numpy", "command gcc")."""
        out = [f"python package {p}" for p in python if normalize(p) not in self.python_packages]
        out += [f"Debian package {p}" for p in apt if p not in self.apt_packages]
        out += [f"command {c}" for c in commands if c not in self.commands]
        return out

    def session_env(self, mount: str) -> dict[str, str]:
        """The environment a session's commands get with the toolchain seen at `mount`."""
        return {"PATH": ":".join((f"{mount}/bin", *PATH_DIRS)), "PYTHONPATH": f"{mount}/lib",
                "PYTHONNOUSERSITE": "1"}

    def home(self) -> "Workspace":
        """The home directory's skeleton (.local/bin/env, which test scripts `source` after
        running the uv installer)."""
        from tempering.sandbox.workspace import Workspace

        return Workspace.from_dir(self.root / "home")


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


