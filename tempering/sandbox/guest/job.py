"""One job inside the sandbox: pid 1 of a fresh pid namespace, in fresh mount and IPC namespaces.

Prepared by the zygote ahead of the job, this init mounts a new workspace, /tmp and /dev/shm
(size-capped tmpfs) and a /proc that shows only this job, drops every capability, sets
no_new_privs, installs the seccomp filter and forks the command's process, which waits for
the job. That process reads the spec, writes the request's files, passes the job's socket to
the init, announces itself so the host can move it into the job's cgroup, waits for GO, takes
the job's stdio, closes every other descriptor, applies rlimits and execs. When it exits, the
init kills whatever it left behind (nothing survives the namespace), reaps it, collects the
requested files safely and reports. Deadlines, cgroups and the output cap are the host's.
"""

from __future__ import annotations

import os
import resource
import signal
import socket

from . import collect, syscalls, wire

WORKSPACE = "/workspace"
_SPEC_LIMIT = 1 << 30  # the host bounds requests; this only guards against a garbled header
_PROC_READONLY = ("/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus")
_TMPFS_FLAGS = syscalls.MS_NOSUID | syscalls.MS_NODEV


def run(zygote: socket.socket, seccomp_program: bytes, disk_mb: int) -> int:
    """Prepare; fork the command's process, which takes the job from the `zygote` socket; wait
    for it, clean up after it and report. Returns an exit code."""
    # Pid 1 ignores signals it has no handler for, but Python installs one for SIGINT: without
    # this reset a job could kill its init with `kill -INT 1` and turn its run into a
    # sandbox_error, which the trainer never penalises.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    try:
        _mount_filesystems(disk_mb)
        _confine(seccomp_program)
    except OSError as e:
        return _fail_when_asked(zygote, f"job setup failed: {e}")
    # The command's process is forked before the job exists, which keeps a fork and a wake-up
    # off the job's critical path: it receives the job itself, then passes us the job's socket.
    to_init, from_child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    child = syscalls.fork_into(_command_process, zygote, to_init, from_child)
    zygote.close()
    to_init.close()
    tag, fds = wire.recv_fds(from_child, 1)
    if tag != wire.JOB or len(fds) != 1:
        _reap(child)
        return 0  # no job came (the sandbox is ending), or it failed before starting and said so
    sock = socket.socket(fileno=fds[0])
    wanted = wire.recv_frame(from_child, _SPEC_LIMIT)
    from_child.close()
    status = _reap(child)
    names, limit = list(wanted["collect"]), int(wanted["collect_limit"])
    try:
        files, skipped = collect.collect(WORKSPACE, names, limit)
    except OSError as e:
        files, skipped = {}, {name: f"workspace unreadable: {e}" for name in names}
    wire.send_frame(sock, {"status": status, "files": wire.encode_files(files), "skipped": skipped})
    return 0


def _fail_when_asked(zygote: socket.socket, message: str) -> int:
    tag, fds = wire.recv_fds(zygote, wire.JOB_FDS)
    if tag == wire.JOB and fds:
        report_error(socket.socket(fileno=fds[0]), message)
    return 1


def _mount_filesystems(disk_mb: int) -> None:
    syscalls.mount(None, "/", None, syscalls.MS_REC | syscalls.MS_PRIVATE)
    for path, mode in ((WORKSPACE, "0755"), ("/tmp", "1777"), ("/dev/shm", "1777")):
        syscalls.mount("tmpfs", path, "tmpfs", _TMPFS_FLAGS, f"size={disk_mb}m,nr_inodes=16384,mode={mode}")
    # A /proc for this pid namespace: the job sees its own processes and nobody else's.
    syscalls.mount("proc", "/proc", "proc", _TMPFS_FLAGS | syscalls.MS_NOEXEC)
    for path in _PROC_READONLY:
        if os.path.exists(path):
            syscalls.bind_readonly(path)


def _confine(seccomp_program: bytes) -> None:
    syscalls.prctl(syscalls.PR_SET_NO_NEW_PRIVS, 1)
    # Not dumpable: the job cannot read this init's memory or descriptors through /proc/1.
    syscalls.prctl(syscalls.PR_SET_DUMPABLE, 0)
    syscalls.drop_capabilities()
    syscalls.install_seccomp(seccomp_program)


def _command_process(zygote: socket.socket, init: socket.socket, init_end: socket.socket) -> int:
    """Take the job: write its files, give the init the job's socket, announce ourselves, wait
    for GO and exec. Returns only on failure."""
    init_end.close()
    tag, fds = wire.recv_fds(zygote, wire.JOB_FDS)
    zygote.close()
    if tag != wire.JOB or len(fds) != wire.JOB_FDS:
        return 126  # no job came: the sandbox is ending
    sock = socket.socket(fileno=fds[0])
    try:
        spec = wire.recv_frame(sock, _SPEC_LIMIT)
        _write_files(wire.decode_files(spec["files"], _SPEC_LIMIT))
        wire.send_fds(init, wire.JOB, [sock.fileno()])
        wire.send_frame(init, {"collect": spec["collect"], "collect_limit": spec["collect_limit"]})
    except (OSError, ValueError, KeyError, TypeError) as e:
        return report_error(sock, f"job setup failed: {type(e).__name__}: {e}")
    init.close()
    sock.sendall(wire.READY)  # the host learns our pid from the kernel (SCM_CREDENTIALS)
    if sock.recv(1) != wire.GO:
        return 126
    for target, fd in enumerate(fds[1:]):
        os.dup2(fd, target)
    os.closerange(3, 1 << 30)
    for sig in (signal.SIGPIPE, signal.SIGXFSZ):  # Python ignores these; programs expect defaults
        signal.signal(sig, signal.SIG_DFL)
    os.setsid()
    os.chdir(WORKSPACE)
    for name, (soft, hard) in spec["rlimits"].items():
        resource.setrlimit(getattr(resource, f"RLIMIT_{name}"), (soft, hard))
    argv = list(spec["argv"])
    try:
        os.execvpe(argv[0], argv, dict(spec["env"]))
    except OSError as e:
        os.write(2, f"tempering sandbox: cannot execute {argv[0]!r}: {e.strerror}\n".encode())
    return 127


def _write_files(files: dict[str, bytes]) -> None:
    for name, data in files.items():
        parts = collect.check_name(name)
        if len(parts) > 1:
            os.makedirs(os.path.join(WORKSPACE, *parts[:-1]), exist_ok=True)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        with open(os.open(os.path.join(WORKSPACE, name), flags, 0o644), "wb") as f:
            f.write(data)


def _reap(child: int) -> int:
    """Wait for the command's process, then kill and reap everything else in the namespace."""
    status = None
    while status is None:
        pid, st = os.waitpid(-1, 0)
        if pid == child:
            status = st
    try:
        os.kill(-1, signal.SIGKILL)  # from pid 1: every other process of this namespace
    except ProcessLookupError:
        pass
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return status


def report_error(sock: socket.socket, message: str) -> int:
    try:
        sock.sendall(wire.ERROR)
        wire.send_frame(sock, {"error": message})
    except OSError:
        pass  # the host is gone or gave up; it reports the job itself
    return 1
