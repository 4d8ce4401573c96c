"""Reading result files out of a workspace without trusting it.

Every name is walked one component at a time from a directory descriptor with O_NOFOLLOW, so
a symlink anywhere in the path is refused rather than followed; anything but a regular file
(FIFO, device, socket, directory) is skipped after an lstat, before any open that could block
or have side effects; sizes are capped in total. Nothing here raises for a hostile workspace:
each refused name is reported with the reason. It does not decide which names to collect.
"""

from __future__ import annotations

import errno
import os
import stat

_OPEN_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_OPEN_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


def check_name(name: str) -> list[str]:
    """The components of a workspace-relative name; ValueError if it could leave the workspace."""
    parts = name.split("/")
    if not name or name.startswith("/") or any(p in ("", ".", "..") for p in parts) or "\0" in name:
        raise ValueError(f"{name!r} is not a plain workspace-relative path")
    return parts


def collect(root: str, names: list[str], limit_bytes: int) -> tuple[dict[str, bytes], dict[str, str]]:
    """Read `names` under directory `root`. Returns (files, skipped) where skipped maps each
    name that was not read to why; the files together hold at most `limit_bytes` bytes."""
    files: dict[str, bytes] = {}
    skipped: dict[str, str] = {}
    left = limit_bytes
    root_fd = os.open(root, _OPEN_DIR)
    try:
        for name in names:
            try:
                data = _read(root_fd, check_name(name), left)
            except (OSError, ValueError) as e:
                skipped[name] = _why(e)
                continue
            files[name] = data
            left -= len(data)
    finally:
        os.close(root_fd)
    return files, skipped


def _read(root_fd: int, parts: list[str], left: int) -> bytes:
    fds = []
    try:
        dir_fd = root_fd
        for part in parts[:-1]:
            dir_fd = os.open(part, _OPEN_DIR, dir_fd=dir_fd)
            fds.append(dir_fd)
        before = os.stat(parts[-1], dir_fd=dir_fd, follow_symlinks=False)
        if not stat.S_ISREG(before.st_mode):
            raise ValueError("not a regular file")
        if before.st_size > left:
            raise ValueError(f"larger than the {left} bytes left to collect")
        fd = os.open(parts[-1], _OPEN_FILE, dir_fd=dir_fd)
        fds.append(fd)
        after = os.fstat(fd)
        if (after.st_dev, after.st_ino) != (before.st_dev, before.st_ino) or not stat.S_ISREG(after.st_mode):
            raise ValueError("replaced while being collected")
        return _read_capped(fd, left)
    finally:
        for fd in fds:
            os.close(fd)


def _read_capped(fd: int, left: int) -> bytes:
    chunks = []
    total = 0
    while True:
        chunk = os.read(fd, min(1 << 20, left + 1 - total))
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        total += len(chunk)
        if total > left:
            raise ValueError(f"grew past the {left} bytes left to collect")


def _why(e: Exception) -> str:
    if isinstance(e, OSError) and e.errno is not None:
        code = errno.errorcode.get(e.errno, str(e.errno))
        if e.errno in (errno.ELOOP, errno.ENOTDIR):
            return f"{code}: a symlink or non-directory in the path (never followed)"
        return f"{code}: {e.strerror}"
    return str(e)
