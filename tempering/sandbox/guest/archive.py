"""Directory trees as uncompressed tar archives, written and read back without trusting them.

`check` reads an archive's members and refuses, naming the member, anything but regular files,
directories and symlinks (hard links, devices, FIFOs, sparse files), names that are absolute or
hold `.`, `..` or empty components, a name given twice, and a member under a symlink or a
regular file of the same archive. The host checks every archive it builds or receives with it.
`extract` writes a checked archive under a directory; every path is walked from a directory
descriptor with O_NOFOLLOW and files are created with O_EXCL, so a symlink already on disk is
never followed either. Modes keep their permission bits only (no setuid, setgid or sticky).
`pack` writes a directory tree as an archive: symlinks as symlinks (never followed), regular
files by content (hard links become copies), other files skipped with the reason; it stops
with ValueError past a size limit. Standard library only: it runs inside the sandbox too.
"""

from __future__ import annotations

import io
import os
import stat
import tarfile

from .collect import check_name

MAX_DEPTH = 256  # directories deeper than this are not packed: each level holds a descriptor
_OPEN_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_CHUNK = 1 << 20


class _View(io.RawIOBase):
    """A read-only file over a buffer, without the copy io.BytesIO would make: inside the sandbox
    the archive, its files and what they are packed into share the job's memory limit."""

    def __init__(self, data) -> None:
        self._data, self._at = memoryview(data).cast("B"), 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        n = min(len(b), len(self._data) - self._at)
        b[:n] = self._data[self._at:self._at + n]
        self._at += n
        return n

    def seek(self, offset: int, whence: int = 0) -> int:
        self._at = max(0, (0, self._at, len(self._data))[whence] + offset)
        return self._at

    def tell(self) -> int:
        return self._at


def check(data: bytes) -> list[tarfile.TarInfo]:
    """The members of `data` in order, all acceptable; ValueError naming the first that is not."""
    if not data:
        return []
    try:
        with tarfile.open(fileobj=_View(data), mode="r:") as tar:
            infos = tar.getmembers()
    except (tarfile.TarError, EOFError) as e:
        raise ValueError(f"not an uncompressed tar archive: {e}") from None
    kinds: dict[str, str] = {}  # name -> "file", "dir", "link" or "implied" (a parent never listed)
    for info in infos:
        why = _refusal(info, kinds)
        if why:
            raise ValueError(f"archive member {info.name!r}: {why}")
    return infos


def _refusal(info: tarfile.TarInfo, kinds: dict[str, str]) -> str:
    if info.islnk():
        return "a hard link (refused: it could name a file outside the archive)"
    if info.ischr() or info.isblk():
        return "a device node"
    if info.isfifo():
        return "a FIFO"
    if info.issparse() or not (info.isreg() or info.isdir() or info.issym()):
        return f"an unsupported member type {info.type!r}"
    try:
        parts = check_name(info.name)
    except ValueError:
        return "not a plain relative path (absolute, or with '.', '..' or empty components)"
    for i in range(1, len(parts)):
        parent = "/".join(parts[:i])
        kind = kinds.setdefault(parent, "implied")
        if kind == "link":
            return f"goes through the symlink {parent!r}"
        if kind == "file":
            return f"goes through the regular file {parent!r}"
    previous = kinds.get(info.name)
    if previous is not None and not (previous == "implied" and info.isdir()):
        return "appears twice, or replaces a directory"
    if info.issym() and (not info.linkname or len(info.linkname) > 4095):
        return "a symlink with an empty or overlong target"
    kinds[info.name] = "dir" if info.isdir() else "link" if info.issym() else "file"
    return ""


def extract(root: str, data: bytes) -> None:
    """Write the members of `data` under the existing directory `root`. ValueError for a member
    `check` refuses or one that cannot be written (naming it and why)."""
    if not data:
        return
    infos = check(data)
    root_fd = os.open(root, _OPEN_DIR)
    dirs = []
    try:
        with tarfile.open(fileobj=_View(data), mode="r:") as tar:
            for info in infos:
                try:
                    if _write(tar, root_fd, info):
                        dirs.append(info)
                except OSError as e:
                    raise ValueError(f"archive member {info.name!r}: {e.strerror or e}") from None
        # Modes of directories last, deepest first: a read-only directory still took its children.
        for info in reversed(dirs):
            fd = _open_path(root_fd, info.name.split("/"), create=False)
            try:
                os.fchmod(fd, info.mode & 0o777)
                os.utime(fd, (info.mtime, info.mtime))
            finally:
                os.close(fd)
    finally:
        os.close(root_fd)


def _write(tar: tarfile.TarFile, root_fd: int, info: tarfile.TarInfo) -> bool:
    """Create one member; True for a directory (its mode is set later)."""
    parts = info.name.split("/")
    parent = _open_path(root_fd, parts[:-1], create=True)
    try:
        if info.isdir():
            try:
                os.mkdir(parts[-1], 0o700, dir_fd=parent)
            except FileExistsError:  # created as a parent of an earlier member: must be a directory
                os.close(os.open(parts[-1], _OPEN_DIR, dir_fd=parent))
            return True
        if info.issym():
            os.symlink(info.linkname, parts[-1], dir_fd=parent)
            return False
        fd = os.open(parts[-1], _CREATE, 0o600, dir_fd=parent)
        try:
            source = tar.extractfile(info)
            while chunk := source.read(_CHUNK):
                os.write(fd, chunk)
            os.fchmod(fd, info.mode & 0o777)
            os.utime(fd, (info.mtime, info.mtime))
        finally:
            os.close(fd)
        return False
    finally:
        if parent != root_fd:
            os.close(parent)


def _open_path(root_fd: int, parts: list[str], create: bool) -> int:
    """A descriptor of directory root/parts, never through a symlink; missing directories are
    made (0755) when `create`. Returns root_fd itself for an empty path."""
    fd = root_fd
    for part in parts:
        if create:
            try:
                os.mkdir(part, 0o755, dir_fd=fd)
            except FileExistsError:
                pass
        try:
            nxt = os.open(part, _OPEN_DIR, dir_fd=fd)
        finally:
            if fd != root_fd:
                os.close(fd)
        fd = nxt
    return fd


def pack(root: str, limit: int, view: bool = False) -> tuple[bytes, dict[str, str]]:
    """The tree under directory `root` as an archive of at most `limit` bytes, and the names
    left out with why. ValueError when the archive would exceed `limit`. The tree must not
    change meanwhile (inside the sandbox every process of the job has ended by then). `view`:
    a memoryview of the archive instead of a copy as bytes."""
    buf = io.BytesIO()
    skipped: dict[str, str] = {}
    root_fd = os.open(root, _OPEN_DIR)
    stack = [(root_fd, "", None)]  # (directory descriptor, name prefix, its remaining entries)
    try:
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
            while stack:
                fd, prefix, names = stack[-1]
                if names is None:
                    names = sorted(os.listdir(fd), reverse=True)
                    stack[-1] = (fd, prefix, names)
                if not names:
                    stack.pop()
                    if fd != root_fd:
                        os.close(fd)
                    continue
                name = names.pop()
                child = _pack_one(tar, fd, name, prefix + name, len(stack), skipped)
                if child is not None:
                    stack.append((child, prefix + name + "/", None))
                if buf.tell() > limit:
                    raise ValueError(f"the archive exceeds its limit of {limit} bytes")
    finally:
        for fd, _, _ in stack:
            if fd != root_fd:
                os.close(fd)
        os.close(root_fd)
    if buf.tell() > limit:
        raise ValueError(f"the archive exceeds its limit of {limit} bytes")
    return (buf.getbuffer() if view else buf.getvalue()), skipped


def _pack_one(tar: tarfile.TarFile, dir_fd: int, name: str, rel: str, depth: int,
              skipped: dict[str, str]) -> int | None:
    """Add one entry; returns a descriptor of it when it is a directory to descend into."""
    st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    info = tarfile.TarInfo(rel)
    info.mtime, info.mode = int(st.st_mtime), st.st_mode & 0o777
    if stat.S_ISLNK(st.st_mode):
        info.type, info.linkname = tarfile.SYMTYPE, os.readlink(name, dir_fd=dir_fd)
        tar.addfile(info)
        return None
    if stat.S_ISDIR(st.st_mode):
        if depth > MAX_DEPTH:
            skipped[rel] = f"deeper than {MAX_DEPTH} directories"
            return None
        info.type = tarfile.DIRTYPE
        tar.addfile(info)
        if st.st_mode & 0o500 != 0o500:  # the job's own directory: its owner may always read it
            os.chmod(name, st.st_mode & 0o777 | 0o500, dir_fd=dir_fd)
        return os.open(name, _OPEN_DIR, dir_fd=dir_fd)
    if not stat.S_ISREG(st.st_mode):
        skipped[rel] = "not a regular file, directory or symlink"
        return None
    if not st.st_mode & 0o400:
        os.chmod(name, st.st_mode & 0o777 | 0o400, dir_fd=dir_fd)
    fd = os.open(name, _READ, dir_fd=dir_fd)
    try:
        after = os.fstat(fd)
        if (after.st_ino, after.st_dev) != (st.st_ino, st.st_dev) or not stat.S_ISREG(after.st_mode):
            skipped[rel] = "replaced while being packed"
            return None
        info.size = after.st_size
        with open(fd, "rb", closefd=False) as f:
            tar.addfile(info, f)
    finally:
        os.close(fd)
    return None
