"""ctypes wrappers for the Linux calls the guest needs and Python 3.11's `os` module lacks.

unshare, setns, mount, prctl, capset, ptrace's detach and installing a seccomp program, plus
`fork_into`, the one way the guest forks. This module holds no policy: `job.py` decides what to mount and what
to drop. Linux with glibc only.
"""

from __future__ import annotations

import ctypes
import errno
import os
import struct
import sys

_libc = ctypes.CDLL(None, use_errno=True)

CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
CLONE_NEWPID = 0x20000000

MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REMOUNT = 32
MS_BIND = 4096
MS_MOVE = 8192
MS_REC = 16384
MS_PRIVATE = 1 << 18

PTRACE_DETACH = 17

PR_SET_DUMPABLE = 4
PR_SET_SECCOMP = 22
PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
SECCOMP_MODE_FILTER = 2

_LINUX_CAPABILITY_VERSION_3 = 0x20080522


def _check(ret: int, what: str) -> int:
    if ret < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return ret


def _c(s: str | None) -> bytes | None:
    return None if s is None else s.encode()


def fork_into(fn, *args) -> int:
    """Fork; the child runs fn(*args) and exits with its return value, never returning into
    the caller's code (1 if fn raised). Returns the child's pid to the parent."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            code = fn(*args)
        finally:
            if sys.exc_info()[0] is not None:  # an exception is on its way out: log it first
                import traceback  # here only: every module the zygote imports costs each job

                traceback.print_exc()  # to the zygote's stderr, which the host shows on failure
            os._exit(code)
    return pid


def ptrace_detach(pid: int, signal_number: int) -> None:
    """Stop tracing `pid` (a command that asked this process, its parent, to trace it),
    delivering `signal_number` (0: none) as it resumes."""
    _check(_libc.ptrace(ctypes.c_long(PTRACE_DETACH), ctypes.c_long(pid), None, ctypes.c_void_p(signal_number)),
           "ptrace(PTRACE_DETACH)")


def unshare(flags: int) -> None:
    _check(_libc.unshare(ctypes.c_int(flags)), "unshare")


def setns(fd: int, nstype: int) -> None:
    _check(_libc.setns(ctypes.c_int(fd), ctypes.c_int(nstype)), "setns")


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    ret = _libc.mount(_c(source), _c(target), _c(fstype), ctypes.c_ulong(flags), _c(data))
    _check(ret, f"mount {target}")


def prctl(option: int, arg2: int = 0, arg3: int = 0) -> int:
    ret = _libc.prctl(ctypes.c_int(option), ctypes.c_ulong(arg2), ctypes.c_ulong(arg3),
                      ctypes.c_ulong(0), ctypes.c_ulong(0))
    return _check(ret, f"prctl({option})")


def empty_bounding_set() -> None:
    """Drop every capability from the bounding set (needs CAP_SETPCAP). Effective and permitted
    capabilities stay: the bounding set only caps what an exec can grant, so the zygote does
    this once and every job inherits it."""
    # Drop until the kernel says EINVAL (past its last capability): cheaper than reading
    # /proc/sys/kernel/cap_last_cap.
    for cap in range(64):
        try:
            prctl(PR_CAPBSET_DROP, cap)
        except OSError as e:
            if e.errno != errno.EINVAL or cap == 0:
                raise
            return


def drop_capabilities() -> None:
    """Empty the ambient, effective, permitted and inheritable sets. With an empty bounding set,
    no_new_privs and a non-root uid, nothing this process or a descendant executes can hold a
    capability, even in its own namespaces."""
    prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL)
    header = ctypes.create_string_buffer(struct.pack("Ii", _LINUX_CAPABILITY_VERSION_3, 0))
    data = ctypes.create_string_buffer(bytes(24))  # two zeroed __user_cap_data_struct
    _check(_libc.capset(header, data), "capset")


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def install_seccomp(program: bytes) -> None:
    """Install a classic-BPF seccomp program (8-byte sock_filter records) on this thread; it is
    inherited by every child and survives execve. Requires no_new_privs (set it first)."""
    assert len(program) % 8 == 0 and program, "a seccomp program is a non-empty list of sock_filter"
    buf = ctypes.create_string_buffer(program, len(program))
    fprog = _SockFprog(len(program) // 8, ctypes.cast(buf, ctypes.c_void_p))
    _check(_libc.prctl(ctypes.c_int(PR_SET_SECCOMP), ctypes.c_ulong(SECCOMP_MODE_FILTER),
                       ctypes.byref(fprog), ctypes.c_ulong(0), ctypes.c_ulong(0)), "seccomp")
