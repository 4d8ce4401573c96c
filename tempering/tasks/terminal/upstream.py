"""The upstream libraries the generated tasks mutate: fetched from PyPI, verified, unpacked in the cache.

The lock (`libraries.lock.toml` in the data folder, written by scripts/generate_mutation_tasks.py)
pins each library by name, version, sdist file name and sha256, and names the files of the
sdist the tasks use: the source that becomes /app, the test files (flattened into /tests) and
the licence. `ensure` downloads a missing sdist with pip (`pip download --no-deps --no-binary
:all:`, so the user's index settings apply), checks its sha256 (a mismatch is an error naming
the library), and unpacks those files into `<cache>/terminal/libraries/<name>-<version>/`
(`app/`, `tests/`, the licence, and `library.json` with the licence recorded from the
package's own metadata). Offline, a cold library raises `Offline`, one line naming it. Nothing
of a library is ever in the repository; mutating it and writing task folders is `generated`.
"""

from __future__ import annotations

import functools
import json
import shutil
import tarfile
import tempfile
import tomllib
from dataclasses import dataclass
from email.parser import HeaderParser
from pathlib import Path
from typing import Callable

from tempering import cache
from tempering.errors import UserError
from tempering.tasks.terminal import data


class UpstreamError(UserError):
    """A library's sdist does not match its lock (hash, files); the message names the library."""


class Offline(UpstreamError):
    """A library's sdist is not in the cache and could not be downloaded."""


@dataclass(frozen=True)
class Pin:
    """One library of the lock. Paths are inside the sdist's top folder: `src_root`/`app_files`
    become /app, `test_root`/`tests` keys become the flat names of /tests (its values),
    `test_root`/`support` are copied beside them under their base names."""

    name: str
    version: str
    sdist: str
    sha256: str
    license_file: str
    src_root: str
    app_files: tuple[str, ...]
    test_root: str
    tests: dict[str, str]
    support: tuple[str, ...]
    imports: tuple[str, ...]
    why: str


@functools.cache
def pins() -> dict[str, Pin]:
    """Library name -> its pin, in lock order."""
    path = data.lock_file()
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
        return {d["name"]: Pin(d["name"], d["version"], d["sdist"], d["sha256"], d["license_file"], d["src_root"],
                               tuple(d["app_files"]), d["test_root"], dict(d["tests"]), tuple(d["support"]),
                               tuple(d["imports"]), d["why"]) for d in doc["library"]}
    except (OSError, tomllib.TOMLDecodeError, KeyError, TypeError) as e:
        raise UpstreamError(f"{path}: not a readable library lock ({type(e).__name__}: {e})") from None


def root() -> Path:
    return cache.root() / "terminal"


def library_dir(pin: Pin) -> Path:
    return root() / "libraries" / f"{pin.name}-{pin.version}"


def built(pin: Pin) -> bool:
    return (library_dir(pin) / "library.json").is_file()


def meta(pin: Pin) -> dict:
    """The unpacked library's library.json (UpstreamError when it is not built)."""
    try:
        return json.loads((library_dir(pin) / "library.json").read_text(encoding="utf-8"))
    except OSError:
        raise UpstreamError(f"{pin.name} {pin.version} is not built in {library_dir(pin)} "
                            "(python -m tempering.tasks.terminal build)") from None


def ensure(pin: Pin, log: Callable[[str], None] = lambda _: None) -> Path:
    """The library unpacked in the cache, fetched and verified first if it is not."""
    if built(pin):
        return library_dir(pin)
    sdist = fetch(pin, log)
    return unpack(pin, sdist)


def fetch(pin: Pin, log: Callable[[str], None] = lambda _: None) -> Path:
    """The verified sdist in `<cache>/terminal/sdists/`, downloaded by pip when missing."""
    try:
        return cache.pinned(root() / "sdists", f"{pin.name}=={pin.version}", pin.sdist, pin.sha256, source=True,
                            log=log, timeout_s=600)
    except cache.FetchFailed as e:
        raise Offline(f"{pin.name} {pin.version}: {e}") from None
    except cache.HashMismatch as e:
        raise UpstreamError(f"{pin.name} {pin.version}: {e}") from None


def unpack(pin: Pin, sdist: Path) -> Path:
    """The lock's files of `sdist` into the library's cache folder, written whole or not at all."""
    dest = library_dir(pin)
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest.parent, prefix=f".{dest.name}-") as tmp:
        top = _extract(sdist, Path(tmp) / "sdist")
        new = Path(tmp) / "new"
        src = top / pin.src_root
        tests = top / pin.test_root
        copies = [(src / f, new / "app" / f) for f in pin.app_files]
        copies += [(tests / rel, new / "tests" / flat) for rel, flat in pin.tests.items()]
        copies += [(tests / rel, new / "tests" / Path(rel).name) for rel in pin.support]
        copies += [(top / pin.license_file, new / Path(pin.license_file).name)]
        for a, b in copies:
            if not a.is_file():
                raise UpstreamError(f"{pin.name} {pin.version}: {a.relative_to(top)} is not in {sdist.name}")
            b.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(a, b)
        info = _metadata(top)
        licence = license_of(info, (top / pin.license_file).read_text(encoding="utf-8", errors="replace"))
        meta = {"name": pin.name, "version": pin.version, "license": licence,
                "license_file": Path(pin.license_file).name, "sdist": pin.sdist, "sdist_sha256": pin.sha256,
                "source": f"https://pypi.org/project/{pin.name}/{pin.version}/", "imports": list(pin.imports),
                "source_lines": sum(len((new / "app" / f).read_bytes().splitlines())
                                    for f in pin.app_files if f.endswith(".py")),
                "test_files": sorted(pin.tests.values()), "support_files": sorted(Path(s).name for s in pin.support),
                "why": pin.why}
        (new / "library.json").write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")
        try:
            new.rename(dest)
        except OSError:
            if not built(pin):  # not another process's finished copy: a real failure
                raise
    return dest


def _extract(sdist: Path, into: Path) -> Path:
    with tarfile.open(sdist) as tf:
        tf.extractall(into, filter="data")
    tops = [p for p in into.iterdir() if p.is_dir()]
    if len(tops) != 1:
        raise UpstreamError(f"{sdist.name}: expected one top folder, found {[p.name for p in tops]}")
    return tops[0]


def _metadata(top: Path) -> dict[str, list[str]]:
    """PKG-INFO's fields (name -> values), empty when the sdist has none."""
    try:
        msg = HeaderParser().parsestr((top / "PKG-INFO").read_text(encoding="utf-8", errors="replace"))
    except OSError:
        return {}
    out: dict[str, list[str]] = {}
    for key, value in msg.items():
        out.setdefault(key.lower(), []).append(value.strip())
    return out


_CLASSIFIERS = {"MIT License": "MIT", "Apache Software License": "Apache-2.0", "ISC License (ISCL)": "ISC",
                "Python Software Foundation License": "PSF-2.0"}


def license_of(info: dict[str, list[str]], text: str) -> str:
    """The package's licence as an SPDX id, from its own metadata: License-Expression, else a
    one-word License field, else its trove classifier (BSD's clause count read from the licence
    text). What cannot be told is "unknown: <what the metadata says>"."""
    if info.get("license-expression"):
        return info["license-expression"][0]
    field = (info.get("license") or [""])[0]
    if field and " " not in field and len(field) <= 20:
        return field
    for c in info.get("classifier", []):
        kind = c.rsplit("::", 1)[-1].strip()
        if c.startswith("License ::") and kind in _CLASSIFIERS:
            return _CLASSIFIERS[kind]
        if c.startswith("License ::") and kind == "BSD License":
            # the third clause is the one against using the authors' names to endorse or promote
            return "BSD-3-Clause" if "endorse or promote" in " ".join(text.lower().split()) else "BSD-2-Clause"
    return f"unknown: {field or 'no licence in the metadata'}"
