"""Wheels of source-only Python packages, built inside the sandbox for a package layer.

A layer is installed from wheels only: installing a wheel runs none of its code, while
building a source package runs its setup on the machine that builds it. So when the index
has no wheel of a requirement, `source` fetches its source archive (from the local folders of
PIP_FIND_LINKS, then, unless PIP_NO_INDEX, the index's Simple API: PIP_INDEX_URL or PyPI),
checked against the index's sha256, and `build` makes the wheel with the sandbox's own pip in
a confined, offline job (`--no-build-isolation`: the build backend must be the sandbox's
setuptools); the layer then installs that wheel like any other. A package that is not on the
index, needs other build tools or fails to build is a WheelError naming it; only the isolated
backend builds (the unisolated one would run the package's code on the host). Every download
and build has a deadline. It decides nothing about what a layer holds (`layers`).
"""

from __future__ import annotations

import hashlib
import json
import os
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urljoin

from tempering.sandbox.request import Sandbox
from tempering.sandbox.session import SessionSpec
from tempering.sandbox.toolchain import normalize
from tempering.sandbox.toolchain.shims import requirement_name, satisfies, version_key
from tempering.sandbox.workspace import Workspace

FETCH_TIMEOUT_S = 120.0
BUILD_TIMEOUT_S = 600.0
_SOURCE_SUFFIXES = (".tar.gz", ".zip")
_SIMPLE_JSON = "application/vnd.pypi.simple.v1+json"


class WheelError(OSError):
    """No wheel could be made for a requirement; the message is one line naming it and why."""


def source(requirement: str, timeout_s: float = FETCH_TIMEOUT_S) -> tuple[str, bytes]:
    """(file name, bytes) of the newest source archive that meets `requirement`."""
    name = requirement_name(requirement)
    if name is None:
        raise WheelError(f"{requirement}: not a package's name")
    found = _local_sources(name) or _index_sources(name, timeout_s)
    fitting = [(v, f) for v, f in found if satisfies(requirement, v) and version_key(v) is not None]
    if not fitting:
        raise WheelError(f"{requirement}: no source archive of it either ({len(found)} of other versions)")
    version, (filename, where, sha256) = max(fitting, key=lambda vf: version_key(vf[0]))
    data = Path(where).read_bytes() if "://" not in where else _get(where, timeout_s)
    if sha256 and hashlib.sha256(data).hexdigest() != sha256:
        raise WheelError(f"{requirement}: {filename} does not match the index's sha256")
    return filename, data


def build(sandbox: Sandbox, filename: str, data: bytes, timeout_s: float = BUILD_TIMEOUT_S) -> tuple[str, bytes]:
    """The wheel (file name, bytes) the sandbox's pip builds from source archive `filename`."""
    if sandbox.name != "bwrap":
        raise WheelError(f"{filename}: a source package is built only in the isolated sandbox (building runs its "
                         "code)")
    workspace = Workspace.from_files({filename: data}).mkdir("tmp")  # TMPDIR: the job's /tmp is small
    spec = SessionSpec(workdir="/build", workspace=workspace, disk_mb=512, max_commands=1, wall_s=timeout_s,
                       cpu_s=timeout_s, env={"TMPDIR": "/build/tmp"})
    command = ("/usr/bin/python3", "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
               "--disable-pip-version-check", "--wheel-dir", "out", filename)
    with sandbox.open_session(spec) as session:
        r = session.run(command, time_limit_s=timeout_s, memory_mb=2048)
        built = [n for n in session.workspace.names() if n.startswith("out/") and n.endswith(".whl")]
        if not r.ok or len(built) != 1:
            tail = " | ".join(line for line in (r.stderr or r.stdout).strip().splitlines()[-2:])
            raise WheelError(f"{filename}: the sandbox could not build a wheel of it ({r.reason.value}): {tail}")
        return built[0][len("out/"):], session.workspace.read(built[0])


def _local_sources(name: str) -> list[tuple[str, tuple[str, str, str]]]:
    """(version, (file name, path, "")) of the source archives in PIP_FIND_LINKS's folders."""
    found = []
    for link in os.environ.get("PIP_FIND_LINKS", "").split():
        folder = Path(link[len("file://"):] if link.startswith("file://") else link)
        if folder.is_dir():
            found += [(v, (p.name, str(p), "")) for p in folder.iterdir() if (v := _version(p.name, name))]
    return found


def _index_sources(name: str, timeout_s: float) -> list[tuple[str, tuple[str, str, str]]]:
    """(version, (file name, URL, sha256)) of the index's source archives (PEP 691's JSON)."""
    if os.environ.get("PIP_NO_INDEX", "").lower() in ("1", "true", "yes", "on"):
        return []
    index = os.environ.get("PIP_INDEX_URL", "https://pypi.org/simple").rstrip("/") + "/"
    page_url = urljoin(index, normalize(name) + "/")
    try:
        page = json.loads(_get(page_url, timeout_s, accept=_SIMPLE_JSON))
    except ValueError as e:
        raise WheelError(f"{name}: the index's page {page_url} is not JSON: {e}") from None
    return [(v, (f["filename"], urljoin(page_url, f["url"]), f.get("hashes", {}).get("sha256", "")))
            for f in page.get("files", []) if not f.get("yanked") and (v := _version(f["filename"], name))]


def _version(filename: str, name: str) -> str:
    """The version of source archive `filename` of package `name` ("" when it is not one)."""
    for suffix in _SOURCE_SUFFIXES:
        if filename.endswith(suffix):
            stem, _, version = filename[:-len(suffix)].rpartition("-")
            return version if normalize(stem) == normalize(name) else ""
    return ""


def _get(url: str, timeout_s: float, accept: str = "*/*") -> bytes:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers={"Accept": accept}), timeout=timeout_s) as f:
            return f.read()
    except (urllib.error.URLError, OSError) as e:
        raise WheelError(f"cannot fetch {url} (offline?): {e}") from None
