"""What a sandbox looks like from inside, as a bubblewrap command line, and the files it needs.

`Staging` is a private host directory holding a copy of the guest package (the installed
package may sit where the unprivileged sandbox user cannot read it) and a minimal /etc: our
own passwd, group and hosts plus copies of the few host files programs need (the loader
cache, time zone, ...), one directory bound once, because every mount is copied into and torn
down with each job's mount namespace. `command` builds the bwrap argv: every namespace
unshared (user, pid, net, ipc, uts, cgroup), no further user namespaces, a clean environment,
a new session, only the system directories and that /etc bound read-only, a read-only /dev
and root, and the zygote as the program; `as_host_user` starts it as the unprivileged host
uid. Per-job mounts are the guest's (`guest.job`). A sandbox that serves sessions (`late`)
differs in three ways: its inits keep CAP_SYS_CHROOT too until the job arrives, its root has
an empty NEWROOT on which they assemble a job's own root (`guest.rootfs`), and the toolchain,
if any, is bound read-only at TOOLCHAIN_MOUNT, the folder of package layers at LAYERS (which
no job's root shows: an init binds only its job's own layer, at request.LAYER_MOUNT).
"""

from __future__ import annotations

import glob
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tempering.sandbox import guest
from tempering.sandbox_paths import WORKSPACE

GUEST_ROOT = "/opt/tempering"  # the staged guest package appears here inside the sandbox
TOOLCHAIN_MOUNT = "/opt/toolchain"  # where a session sees the toolchain (`toolchain`)
NEWROOT = "/.newroot"  # guest.rootfs.NEWROOT
LAYERS = "/.layers"  # guest.rootfs.LAYERS: every built layer, hidden from the jobs
GUEST_UID = 1000  # the job's uid inside its user namespace (not root: exec grants no capabilities)
PATH = "/usr/local/bin:/usr/bin:/bin"
LOCALE = "C.UTF-8"  # the zygote's locale and the jobs' default one (job.BASE_ENV)
_SYSTEM_DIRS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_ETC = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "localtime", "nsswitch.conf",
        "protocols", "services", "mime.types", "ssl/certs", "ssl/openssl.cnf")
_PASSWD = (f"root:x:0:0:root:/root:/usr/sbin/nologin\n"
           f"sandbox:x:{GUEST_UID}:{GUEST_UID}:sandbox:{WORKSPACE}:/bin/sh\n"
           "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n")
_GROUP = f"root:x:0:\nsandbox:x:{GUEST_UID}:\nnogroup:x:65534:\n"
_HOSTS = "127.0.0.1 localhost sandbox\n::1 localhost\n"
_ZYGOTE_MAIN = (f"import sys; sys.path.insert(0, {GUEST_ROOT!r}); from guest import zygote; "
                "raise SystemExit(zygote.main(sys.argv))")


@dataclass
class Staging:
    root: Path

    @classmethod
    def create(cls) -> "Staging":
        root = Path(tempfile.mkdtemp(prefix="tempering-sandbox-"))
        os.chmod(root, 0o755)  # the sandbox runs as an unprivileged uid that must read it
        (root / "guest").mkdir(mode=0o755)
        for src in Path(guest.__file__).parent.glob("*.py"):
            shutil.copyfile(src, root / "guest" / src.name)
            os.chmod(root / "guest" / src.name, 0o644)
        etc = root / "etc"
        etc.mkdir(mode=0o755)
        for name in _ETC + tuple(os.path.basename(p) for p in glob.glob("/etc/python3*")):
            _copy_public(Path("/etc", name), etc / name)
        for name, text in (("passwd", _PASSWD), ("group", _GROUP), ("hosts", _HOSTS)):
            (etc / name).write_text(text)
            os.chmod(etc / name, 0o644)
        return cls(root)

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


def _copy_public(src: Path, dst: Path) -> None:
    """Copy a world-readable file or directory, symlinks as symlinks; skip anything else
    (a private key is not world-readable, so it never reaches a sandbox)."""
    try:
        st = src.lstat()
    except FileNotFoundError:
        return
    dst.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
    if src.is_symlink():
        os.symlink(os.readlink(src), dst)
    elif src.is_dir() and st.st_mode & 0o005 == 0o005:
        dst.mkdir(mode=0o755)
        for child in src.iterdir():
            _copy_public(child, dst / child.name)
    elif src.is_file() and st.st_mode & 0o004:
        shutil.copyfile(src, dst)
        os.chmod(dst, 0o644)


def as_host_user(run_as: tuple[int, int] | None) -> dict:
    """subprocess arguments that start bwrap as host (uid, gid) `run_as` with no supplementary
    groups; None: as this process's user."""
    return {"user": run_as[0], "group": run_as[1], "extra_groups": []} if run_as else {}


def command(bwrap: str, staging: Staging, guest_python: str, ro_paths: tuple[str, ...],
            disk_mb: int, disable_userns: bool, late: bool = False, toolchain: str | None = None,
            layers: str | None = None) -> list[str]:
    """The argv that starts one sandbox running the zygote; "{fd}" stands for the control fd.
    `late`: a sandbox for sessions (inits confined once their job has arrived), with
    `toolchain` (a host directory) bound at TOOLCHAIN_MOUNT and `layers` (the host folder of
    package layers) at LAYERS."""
    argv = [bwrap, "--unshare-all", "--unshare-user", "--uid", str(GUEST_UID), "--gid", str(GUEST_UID),
            "--hostname", "sandbox", "--new-session", "--clearenv", "--setenv", "PATH", PATH,
            "--setenv", "LANG", LOCALE,
            # Only the zygote and each job's init hold these, to mount per-job filesystems;
            # they are dropped (bounding set included) before any job code runs.
            "--cap-add", "CAP_SYS_ADMIN", "--cap-add", "CAP_SETPCAP"]
    if late:
        argv += ["--cap-add", "CAP_SYS_CHROOT"]  # to enter the job's own root (guest.rootfs)
    if disable_userns:
        argv.append("--disable-userns")
    argv += ["--ro-bind", "/usr", "/usr"]
    for path in _SYSTEM_DIRS:
        if os.path.islink(path):
            argv += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            argv += ["--ro-bind", path, path]
    argv += ["--ro-bind", str(staging.root / "etc"), "/etc"]
    argv += ["--ro-bind", str(staging.root / "guest"), f"{GUEST_ROOT}/guest"]
    for path in ro_paths:
        argv += ["--ro-bind", path, path]
    if late and toolchain:
        argv += ["--ro-bind", toolchain, TOOLCHAIN_MOUNT]
    if late and layers:
        argv += ["--ro-bind", layers, LAYERS]
    argv += ["--proc", "/proc", "--dev", "/dev", "--remount-ro", "/dev",
             "--dir", WORKSPACE, "--dir", "/tmp", *(["--dir", NEWROOT] if late else []), "--remount-ro", "/",
             guest_python, "-I", "-S", "-B", "-c", _ZYGOTE_MAIN, "{fd}", str(disk_mb), *(["late"] if late else [])]
    return argv
