"""Where Tempering keeps what it fetches or builds outside the repository.

One folder, `TEMPERING_CACHE` when set, else `/var/cache/tempering` for root and
`$XDG_CACHE_HOME/tempering` (`~/.cache/tempering`) for anyone else. It holds the sandbox
toolchain (`toolchain/`), the Python package layers of task folders (`layers/`) and the
upstream libraries of the generated terminal tasks (`terminal/`). Root gets a system folder
because the sandbox runs as an unprivileged uid, which must read the toolchain: a home
folder is often private (mode 700), and so is a checkout under it. `folder` makes a
subfolder, world-readable when asked (`public`) and then checks that the uid can reach it;
`pinned` brings a distribution pinned by its sha256 into a folder of it with pip. What is built
from those is its callers' business.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Callable

from tempering.errors import UserError

ENV = "TEMPERING_CACHE"


class CacheError(UserError):
    """The cache folder cannot be used as asked; the message names the path and the fix."""


def root() -> Path:
    """The cache's root folder (not created)."""
    if os.environ.get(ENV):
        return Path(os.environ[ENV]).expanduser().absolute()
    if os.geteuid() == 0:
        return Path("/var/cache/tempering")
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "tempering"


def folder(name: str, public: bool = False) -> Path:
    """`root()/name`, created. `public`: the folders made here are world-readable and every
    folder above it must be searchable by other users (CacheError naming the one that is not)."""
    path = root() / name
    made = [p for p in (path, *path.parents) if not p.exists()]
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise CacheError(f"cannot create the cache folder {path}: {e.strerror} (set {ENV} to a writable folder)") from None
    if public and os.geteuid() == 0:
        for p in made:
            os.chmod(p, 0o755)
        check_public(path)
    return path


def check_public(path: Path, what: str = "cache folder") -> None:
    """`path` readable by other users, and every folder above it searchable by them: the
    sandbox's unprivileged uid reaches it by its path. Only root's sandbox runs as another
    uid (`sandbox.uid`); anyone else's runs as themselves, so nothing is checked then."""
    if os.geteuid() != 0:
        return
    path = path.resolve()
    for p in (path, *path.parents):
        mode = p.stat().st_mode
        if not mode & 0o001 or (p == path and not mode & 0o004):
            raise CacheError(f"{what} {path}: {p} is not readable by other users (mode {oct(mode & 0o777)}), "
                             f"which the sandbox's unprivileged user needs; set {ENV} to a folder under a "
                             "public one (e.g. /var/cache/tempering)")


class FetchFailed(CacheError):
    """pip could not download a pinned distribution (offline, or the index lacks it)."""


class HashMismatch(CacheError):
    """A pinned distribution's bytes are not the ones its pin names; the file was removed."""


def pinned(folder: Path, requirement: str, filename: str, sha256: str, source: bool,
           log: Callable[[str], None] = lambda _: None, timeout_s: float = 1800.0) -> Path:
    """`folder/filename`, the distribution `requirement` (NAME==VERSION) downloaded by pip when it
    is not there (an sdist when `source`, else a wheel; the user's index settings apply) and its
    sha256 checked against the pin, in the cache and after a download. A file that does not match
    is removed (HashMismatch); a download that fails is FetchFailed, with pip's last line."""
    path = folder / filename
    if not path.is_file():
        folder.mkdir(parents=True, exist_ok=True)
        log(f"downloading {requirement} from PyPI")
        with tempfile.TemporaryDirectory(dir=folder, prefix=".download-") as tmp:
            kind = ["--no-binary", ":all:"] if source else ["--only-binary", ":all:"]
            r = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", *kind, "--quiet",
                                "--disable-pip-version-check", "-d", tmp, requirement],
                               capture_output=True, text=True, timeout=timeout_s)
            got = Path(tmp) / filename
            if r.returncode != 0 or not got.is_file():
                tail = [ln for ln in (r.stderr or r.stdout).splitlines() if ln.strip() and "WARNING" not in ln][-1:]
                raise FetchFailed(f"pip could not download {requirement} (offline, and not in the cache at {folder}?)"
                                  + (f": {tail[0]}" if tail else ""))
            _check_sha256(got, sha256)
            os.replace(got, path)
    _check_sha256(path, sha256)
    return path


def _check_sha256(path: Path, sha256: str) -> None:
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != sha256:
        path.unlink()
        raise HashMismatch(f"{path.name} has sha256 {digest}, not the pinned {sha256} (removed; try again)")
