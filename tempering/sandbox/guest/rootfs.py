"""A job's own root filesystem, for a job that asks for filesystems at absolute paths (a
session's workspace at /app, the hidden tests at /tests, /logs/verifier).

bwrap's root is a read-only tmpfs, and in the init's mount namespace its flags are locked (it
was mounted in a more privileged user namespace): nothing can be created on it. So the init
assembles a new root on a fresh tmpfs at NEWROOT: each entry of the current root is bound
(recursively) into it, except that a directory on the way to a requested path is recreated
and its own entries bound one by one; each requested path gets a fresh size-capped tmpfs.
Read-only ones are filled from their archives and remounted read-only here, while the init
still holds CAP_SYS_ADMIN; the new root is moved over "/" and the init chroots into it (an
unmount of the old root would wait for an RCU grace period, milliseconds on a busy machine),
and the new root is made read-only. Writable filesystems are filled later, after the init
has dropped its privileges (`job`). The host checks the paths (`request.Mount`: absolute,
normalised, not nested, not the sandbox's own); this module refuses a path that goes through
a symlink. A job's package layer, a folder of the sandbox's LAYERS (which no job's root
shows), is bound read-only at LAYER_MOUNT. It runs only in inits that confine themselves
after the job arrives.
"""

from __future__ import annotations

import errno
import os
import re
import stat

from . import archive, syscalls

NEWROOT = "/.newroot"  # made by bwrap in sandboxes whose inits build a new root (bwrap.command)
LAYERS = "/.layers"  # bwrap.LAYERS: every built package layer, bound by bwrap
LAYER_MOUNT = "/opt/layer"  # request.LAYER_MOUNT: where a job sees its own
_LAYER_NAME = re.compile(r"[0-9a-f]{64}")
_FLAGS = syscalls.MS_NOSUID | syscalls.MS_NODEV
_INODES = 16384


def enter(mounts: list[dict], contents: list[bytes], layer: str = "") -> None:
    """Make the new root with `mounts` ({"path", "writable", "size_mb"}; `contents` their
    archives, in order) and `layer` (a layer's name, "" for none), fill the read-only ones,
    and chroot into it. Raises OSError or ValueError (a refused archive or layer name)."""
    syscalls.mount("tmpfs", NEWROOT, "tmpfs", _FLAGS, "size=1m,nr_inodes=4096,mode=0755")
    paths = [m["path"] for m in mounts] + ([LAYER_MOUNT] if layer else [])
    _populate("/", NEWROOT, paths)
    if layer:
        _bind_layer(layer)
    for m, data in zip(mounts, contents):
        target = NEWROOT + m["path"]
        os.makedirs(target, mode=0o755, exist_ok=True)
        size = f"size={int(m['size_mb'])}m,nr_inodes={_INODES},mode=0755"
        syscalls.mount("tmpfs", target, "tmpfs", _FLAGS, size)
        if not m["writable"]:
            archive.extract(target, data)
            syscalls.mount(None, target, None, syscalls.MS_REMOUNT | syscalls.MS_RDONLY | _FLAGS, size)
    os.chdir(NEWROOT)
    syscalls.mount(NEWROOT, "/", None, syscalls.MS_MOVE)
    os.chroot(".")
    os.chdir("/")
    syscalls.mount(None, "/", None, syscalls.MS_REMOUNT | syscalls.MS_BIND | syscalls.MS_RDONLY | _FLAGS)


def _bind_layer(name: str) -> None:
    """Bind the sandbox's layer `name` read-only at LAYER_MOUNT in the new root."""
    if not _LAYER_NAME.fullmatch(name):
        raise ValueError(f"{name!r} is not a layer's name")
    source = os.path.join(LAYERS, name)
    if not stat.S_ISDIR(os.lstat(source).st_mode):  # FileNotFoundError when not built
        raise OSError(errno.ENOTDIR, f"layer {name} is not a folder")
    target = NEWROOT + LAYER_MOUNT
    os.makedirs(target, mode=0o755)
    syscalls.mount(source, target, None, syscalls.MS_BIND | syscalls.MS_REC)
    syscalls.mount(None, target, None, syscalls.MS_REMOUNT | syscalls.MS_BIND | syscalls.MS_RDONLY | _FLAGS)


def _populate(src: str, dst: str, wanted: list[str]) -> None:
    """Bind src's entries into the new directory dst, recreating those on the way to a path
    in `wanted` (absolute paths under src) instead of binding them whole."""
    for name in os.listdir(src):
        source = os.path.join(src, name)
        target = os.path.join(dst, name)
        if source in (NEWROOT, LAYERS) or source in wanted:
            continue  # the new root itself, every layer; a requested path gets its own filesystem later
        below = [p for p in wanted if p.startswith(source + "/")]
        st = os.lstat(source)
        if stat.S_ISLNK(st.st_mode):
            if below:
                raise OSError(errno.ELOOP, f"{below[0]} goes through the symlink {source}")
            os.symlink(os.readlink(source), target)
        elif stat.S_ISDIR(st.st_mode):
            os.mkdir(target, st.st_mode & 0o777)
            if below:
                _populate(source, target, below)
            else:
                syscalls.mount(source, target, None, syscalls.MS_BIND | syscalls.MS_REC)
        elif below:
            raise OSError(errno.ENOTDIR, f"{below[0]} goes through the file {source}")
        else:  # a file, device or socket next to a recreated directory: bind it in place
            os.close(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600))
            syscalls.mount(source, target, None, syscalls.MS_BIND)
