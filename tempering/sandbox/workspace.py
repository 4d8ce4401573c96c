"""`Workspace`: a directory tree held on the host as an uncompressed tar archive.

A sandbox session keeps its workspace as one of these between commands: each command's job
unpacks it into its own tmpfs and packs it back (`guest.archive`), so a session is host memory
and nothing else. The archive keeps directories, symlinks (as symlinks), regular files with
their permission bits and modification times; every archive is checked when a `Workspace` is
made (`guest.archive.check`: no hard links, devices, absolute or `..` names, nothing under a
symlink), so one that exists can be unpacked safely anywhere. Single files are read and
written here, on the host, without a sandbox job. Symlinks are never followed: `read` returns
regular files only. It does not run anything.
"""

from __future__ import annotations

import io
import os
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from tempering.sandbox.guest import archive
from tempering.sandbox.guest.collect import check_name

FROM_DIR_LIMIT_BYTES = 1 << 30  # what `from_dir` reads at most (a task's build context)


@dataclass(frozen=True)
class Workspace:
    """A directory tree as an uncompressed tar archive (b"": empty). Immutable: `write` and
    `merge` return new workspaces. ValueError for an archive `guest.archive.check` refuses."""

    archive: bytes = b""

    def __post_init__(self) -> None:
        archive.check(self.archive)

    def __repr__(self) -> str:  # the archive itself would fill a screen
        return f"Workspace({len(self.archive)} bytes of archive)"

    @classmethod
    def empty(cls) -> "Workspace":
        return cls()

    @classmethod
    def from_dir(cls, path: str | Path, limit_bytes: int = FROM_DIR_LIMIT_BYTES) -> "Workspace":
        """The tree under host directory `path`: symlinks kept as symlinks, FIFOs, sockets and
        devices left out. ValueError past `limit_bytes` of archive."""
        if not Path(path).is_dir():
            raise ValueError(f"{path} is not a directory")
        data, _skipped = archive.pack(str(path), limit_bytes)
        return cls(data)

    @classmethod
    def from_files(cls, files: Mapping[str, bytes], mode: int = 0o644) -> "Workspace":
        """Regular files by workdir-relative name (parent directories made 0755)."""
        ws = cls()
        for name, data in files.items():
            ws = ws.write(name, data, mode)
        return ws

    def _members(self) -> list[tarfile.TarInfo]:
        return archive.check(self.archive)

    def names(self) -> list[str]:
        """Every member: directories, files and symlinks, in archive order."""
        return [m.name for m in self._members()]

    @property
    def size(self) -> int:
        """Bytes of file content (what the tmpfs holding it uses, give or take pages)."""
        return sum(m.size for m in self._members() if m.isreg())

    def kind(self, path: str) -> str | None:
        """"file", "dir" or "symlink" for member `path`, None when absent."""
        m = self._member(path)
        return None if m is None else "dir" if m.isdir() else "symlink" if m.issym() else "file"

    def mode(self, path: str) -> int | None:
        """The permission bits of member `path`, None when absent."""
        m = self._member(path)
        return None if m is None else m.mode & 0o777

    def _member(self, path: str) -> tarfile.TarInfo | None:
        name = _name(path)
        return next((m for m in self._members() if m.name == name), None)

    def read(self, path: str) -> bytes | None:
        """The content of regular file `path` (workdir-relative), or None: absent, a directory
        or a symlink (never followed)."""
        name = _name(path)
        if not self.archive:
            return None
        with tarfile.open(fileobj=io.BytesIO(self.archive), mode="r:") as tar:
            found = None
            for m in tar.getmembers():
                if m.name == name:
                    found = m
            if found is None or not found.isreg():
                return None
            return tar.extractfile(found).read()

    def files(self) -> dict[str, bytes]:
        """Every regular file's content by name."""
        if not self.archive:
            return {}
        with tarfile.open(fileobj=io.BytesIO(self.archive), mode="r:") as tar:
            return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isreg()}

    def write(self, path: str, data: bytes, mode: int = 0o644) -> "Workspace":
        """A copy with regular file `path` holding `data` (replacing a file or symlink of that
        name; missing parent directories made 0755). ValueError when a parent is not a directory."""
        name = _name(path)
        info = tarfile.TarInfo(name)
        # Later than the file it replaces, even within the same second: tools that trust mtime
        # and size (Python's .pyc files, make) must see a rewrite of the same length as a change.
        before = next((m.mtime for m in self._members() if m.name == name), None)
        now = int(time.time())
        info.size, info.mode, info.mtime = len(data), mode & 0o777, now if before is None else max(now, before + 1)
        return self._replaced({name}, [(info, data)])

    def mkdir(self, path: str, mode: int = 0o755) -> "Workspace":
        """A copy with directory `path` (and its parents); unchanged if it is one already."""
        name = _name(path)
        if name in {m.name for m in self._members() if m.isdir()}:
            return self
        info = tarfile.TarInfo(name)
        info.type, info.mode, info.mtime = tarfile.DIRTYPE, mode & 0o777, int(time.time())
        return self._replaced({name}, [(info, None)])

    def merge(self, prefix: str, other: "Workspace") -> "Workspace":
        """A copy with `other`'s members placed under `prefix` ("" for the top), replacing members
        of the same name (Docker's COPY of a directory's contents)."""
        base = _name(prefix) + "/" if prefix not in ("", ".") else ""
        added = []
        with tarfile.open(fileobj=io.BytesIO(other.archive or _EMPTY), mode="r:") as tar:
            for m in tar.getmembers():
                data = tar.extractfile(m).read() if m.isreg() else None
                m.name = base + m.name
                added.append((m, data))
        return self._replaced({m.name for m, _ in added}, added)

    def _replaced(self, names: set[str], added: list) -> "Workspace":
        """This archive without `names`, then the parents `added` needs, then `added`."""
        buf = io.BytesIO()
        present: set[str] = set()
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as out:
            if self.archive:
                with tarfile.open(fileobj=io.BytesIO(self.archive), mode="r:") as tar:
                    for m in tar.getmembers():
                        if m.name not in names:
                            out.addfile(m, tar.extractfile(m) if m.isreg() else None)
                            present.add(m.name)
            for info, data in added:
                for parent in _parents(info.name):
                    if parent not in present:
                        d = tarfile.TarInfo(parent)
                        d.type, d.mode, d.mtime = tarfile.DIRTYPE, 0o755, info.mtime
                        out.addfile(d)
                        present.add(parent)
                out.addfile(info, io.BytesIO(data) if data is not None else None)
                present.add(info.name)
        return Workspace(buf.getvalue())


_EMPTY = tarfile.BLOCKSIZE * b"\0" * 2


def _name(path: str) -> str:
    """A workdir-relative member name from `path` (a leading "./" is dropped). ValueError for a
    name that could leave the workspace."""
    name = path[2:] if path.startswith("./") else path
    name = name[:-1] if name.endswith("/") and len(name) > 1 else name
    check_name(name)
    return name


def _parents(name: str) -> list[str]:
    parts = name.split("/")
    return ["/".join(parts[:i]) for i in range(1, len(parts))]


def unpack_into(ws: Workspace, directory: str | os.PathLike) -> None:
    """Write `ws` into an existing empty host directory (the unisolated backend's workspace)."""
    archive.extract(str(directory), ws.archive)
