"""One job inside the sandbox: its init, pid 1 of a fresh pid namespace in fresh mount and IPC
namespaces.

Made by the zygote ahead of the job, the init mounts a new workspace, /tmp and /dev/shm (capped
tmpfs) and a /proc of its own, drops every capability, sets no_new_privs, installs the seccomp
filter and says READY; the host moves it into the job's cgroup. When the job comes, it writes the
request's files, spawns the command in a new session under the job's rlimits, then kills what
the command left behind, collects the requested files safely and reports (with how many
processes lingered). An init made with `confine_late` (session sandboxes) keeps its privileges
until the job arrives, to build the job's own root with its mounts and package layer (`rootfs`)
before confining itself. Deadlines, cgroups and the output cap are the host's business."""

from __future__ import annotations

import os
import resource
import signal
import socket
import time

from . import collect, syscalls, wire

WORKSPACE = "/workspace"
_SPEC_LIMIT = 1 << 30  # the host bounds requests; this only guards against a garbled header
_TMPFS_FLAGS = syscalls.MS_NOSUID | syscalls.MS_NODEV
_DEFAULT_SIGNALS = (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT)  # Python changes these


def run(sock: socket.socket, seccomp_program: bytes, disk_mb: int, confine_late: bool = False) -> int:
    """Prepare, say READY, wait for the job on `sock`, run it, report. Returns an exit code.
    SIGINT is at its default already: the zygote reset it for every init it forks.
    `confine_late`: keep the privileges to mount the job's filesystems until the job has said
    which it wants."""
    try:
        syscalls.unshare(syscalls.CLONE_NEWNS | syscalls.CLONE_NEWIPC)
        _mount_filesystems(disk_mb)
        if not confine_late:
            _confine(seccomp_program)
    except OSError as e:
        return report_error(sock, f"job setup failed: {e}")
    wire.send_ready(sock)
    tag, stdio = wire.recv_fds(sock, wire.JOB_FDS)
    if tag != wire.JOB or len(stdio) != wire.JOB_FDS:
        return 0  # no job is coming: the sandbox is ending, or this init was discarded
    try:
        spec = wire.recv_frame(sock, _SPEC_LIMIT)
        mounts, layer = list(spec.get("mounts", ())), str(spec.get("layer", ""))
        contents = _split(wire.recv_exact(sock, wire.tail_size(spec, _SPEC_LIMIT)), mounts)
        if confine_late:
            _mount_and_confine(mounts, contents, layer, seccomp_program)
            contents.clear()  # the archives' memory counts against the job's limit: free it now
        elif mounts or layer:
            raise ValueError("this sandbox's inits confine themselves early and cannot mount filesystems")
        workdir = spec.get("workdir", WORKSPACE)
        _write_files(workdir, wire.decode_files(spec["files"], _SPEC_LIMIT))
        argv, env = list(spec["argv"]), dict(spec["env"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        return report_error(sock, f"job setup failed: {type(e).__name__}: {e}")
    status, lingering = _spawn_and_reap(argv, env, spec["rlimits"], stdio, workdir)
    names, limit = list(spec["collect"]), int(spec["collect_limit"])
    try:
        files, skipped = collect.collect(workdir, names, limit)
    except OSError as e:
        files, skipped = {}, {name: f"workspace unreadable: {e}" for name in names}
    packed, sizes, errors = _pack(mounts, skipped)
    report = {"status": status, "files": wire.encode_files(files), "skipped": skipped, "lingering": lingering}
    if mounts:
        report.update(archives=sizes, archive_errors=errors, tail=sum(sizes.values()))
    wire.send_frame(sock, report)
    for data in packed:
        sock.sendall(data)
    return 0


def _split(tail: bytearray, mounts: list[dict]) -> list[memoryview]:
    """The archives of `mounts`, which the tail holds one after the other (views, not copies)."""
    contents, at, view = [], 0, memoryview(tail)
    for m in mounts:
        n = int(m["size"])
        contents.append(view[at:at + n])
        at += n
    if at != len(tail):
        raise ValueError(f"the spec's tail holds {len(tail)} bytes, its mounts {at}")
    return contents


def _mount_and_confine(mounts: list[dict], contents: list[bytes], layer: str, seccomp_program: bytes) -> None:
    """The job's filesystems (read-only ones filled while privileged: their archives are the
    host's, from task folders; the layer bound read-only), then confinement, then the writable
    ones filled unprivileged."""
    if mounts or layer:
        from . import rootfs  # imported only by inits that serve such jobs

        rootfs.enter(mounts, contents, layer)
    _confine(seccomp_program)
    for m, data in zip(mounts, contents):
        if m["writable"] and data:
            from . import archive

            archive.extract(m["path"], data)


def _pack(mounts: list[dict], skipped: dict) -> tuple[list[memoryview], dict[str, int], dict[str, str]]:
    """The archives of the mounts the host wants back: (their bytes, path -> size, path -> why it
    could not be packed). Entries left out are added to `skipped`."""
    chunks, sizes, errors = [], {}, {}
    for m in mounts:
        if not m.get("collect"):
            continue
        from . import archive

        try:
            data, left_out = archive.pack(m["path"], int(m["limit"]), view=True)
        except (OSError, ValueError) as e:
            errors[m["path"]] = f"{type(e).__name__}: {e}"
            continue
        skipped.update({f"{m['path']}/{name}": why for name, why in left_out.items()})
        chunks.append(data)
        sizes[m["path"]] = len(data)
    return chunks, sizes, errors


def _mount_filesystems(disk_mb: int) -> None:
    syscalls.mount(None, "/", None, syscalls.MS_REC | syscalls.MS_PRIVATE)
    for path, mode in ((WORKSPACE, "0755"), ("/tmp", "1777"), ("/dev/shm", "1777")):
        syscalls.mount("tmpfs", path, "tmpfs", _TMPFS_FLAGS, f"size={disk_mb}m,nr_inodes=16384,mode={mode}")
    # A /proc for this pid namespace: the job sees its own processes and nobody else's. Its
    # /proc/sys and sysrq-trigger stay writable only by the real root; the job holds no
    # capability in any namespace, so no read-only bind is needed over them (each mount is
    # paid again by every job).
    syscalls.mount("proc", "/proc", "proc", _TMPFS_FLAGS | syscalls.MS_NOEXEC)


def _confine(seccomp_program: bytes) -> None:
    syscalls.prctl(syscalls.PR_SET_NO_NEW_PRIVS, 1)
    # Not dumpable: the job cannot read this init's memory or descriptors through /proc/1.
    syscalls.prctl(syscalls.PR_SET_DUMPABLE, 0)
    syscalls.drop_capabilities()
    syscalls.install_seccomp(seccomp_program)


def _write_files(workdir: str, files: dict[str, bytes]) -> None:
    for name, data in files.items():
        parts = collect.check_name(name)
        if len(parts) > 1:
            os.makedirs(os.path.join(workdir, *parts[:-1]), exist_ok=True)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        with open(os.open(os.path.join(workdir, name), flags, 0o644), "wb") as f:
            f.write(data)


def _resolve(name: str, path: str) -> str:
    """The file execvp would run for `name` with the job's PATH (posix_spawnp would use ours)."""
    if "/" in name:
        return name
    for d in path.split(":"):
        candidate = os.path.join(d or ".", name)
        if os.access(candidate, os.X_OK) and not os.path.isdir(candidate):
            return candidate
    raise FileNotFoundError(f"{name!r} not found on PATH {path!r}")


def _spawn_and_reap(argv: list[str], env: dict, rlimits: dict, stdio: list[int], workdir: str) -> tuple[int, int]:
    """Start the command in `workdir`, spawned vfork-style (no copy of this interpreter), wait
    for it, then kill and reap everything else in the namespace. Returns the command's wait
    status and how many processes it left running."""
    os.chdir(workdir)
    for name, (soft, hard) in rlimits.items():  # inherited by the command; harmless to the init
        resource.setrlimit(getattr(resource, f"RLIMIT_{name}"), (soft, hard))
    for fd in map(int, os.listdir("/proc/self/fd")):
        if fd > 2 and fd not in stdio:
            try:
                os.set_inheritable(fd, False)  # the command gets its stdio and nothing else
            except OSError:
                pass  # the directory's own descriptor, closed already
    try:
        program = _resolve(argv[0], env.get("PATH", ""))
        child = os.posix_spawn(program, argv, env, setsid=True, setsigdef=_DEFAULT_SIGNALS, setsigmask=(),
                               file_actions=[(os.POSIX_SPAWN_DUP2, fd, target) for target, fd in enumerate(stdio)])
    except OSError as e:
        os.write(stdio[2], f"tempering sandbox: cannot execute {argv[0]!r}: {e.strerror}\n".encode())
        return 127 << 8, 0
    finally:
        for fd in stdio:
            os.close(fd)
    _unprotect_from_oom(child)
    return _reap(child)


def _unprotect_from_oom(child: int) -> None:
    """The host protected this init from the OOM killer; the command must not inherit that, or
    an out-of-memory job could find nothing to kill. Until the child's exec has finished, it
    is still non-dumpable like us and its /proc files refuse the write: retry briefly (an
    exited child refuses it for good)."""
    deadline = time.monotonic() + 0.1
    while True:
        try:
            fd = os.open(f"/proc/{child}/oom_score_adj", os.O_WRONLY | os.O_CLOEXEC)
            try:
                os.write(fd, b"0")
            finally:
                os.close(fd)
            return
        except PermissionError:
            if _exited(child) or time.monotonic() > deadline:
                return  # past the deadline an OOM blocks until the host's deadline kills the job
            os.sched_yield()
        except OSError:
            return  # the command has exited and been reaped


def _exited(pid: int) -> bool:
    try:
        fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY | os.O_CLOEXEC)
        try:
            return os.read(fd, 4096).rsplit(b")", 1)[1].split()[0] in (b"Z", b"X")
        finally:
            os.close(fd)
    except OSError:
        return True


def _reap(child: int) -> tuple[int, int]:
    status = None
    while status is None:
        pid, st = os.waitpid(-1, 0)
        if os.WIFSTOPPED(st):
            _let_go(pid, os.WSTOPSIG(st))
        elif pid == child:
            status = st
    lingering = sum(1 for pid in _others() if not _exited(pid))
    try:
        os.kill(-1, signal.SIGKILL)  # from pid 1: every other process of this namespace
    except ProcessLookupError:
        pass
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return status, lingering


def _let_go(pid: int, sig: int) -> None:
    """A process that asked us (its parent) to trace it (PTRACE_TRACEME) stopped, as tracees do
    at exec and at each signal: we trace nothing, so detach, passing the signal on (an exec's
    SIGTRAP is the tracing's own, and would kill it)."""
    try:
        syscalls.ptrace_detach(pid, 0 if sig == signal.SIGTRAP else sig)
    except OSError:
        pass  # it died meanwhile


def _others() -> list[int]:
    """Every process of this pid namespace but its init (this one)."""
    return [int(name) for name in os.listdir("/proc") if name.isdigit() and name != "1"]


def report_error(sock: socket.socket, message: str) -> int:
    try:
        sock.sendall(wire.ERROR)
        wire.send_frame(sock, {"error": message})
    except OSError:
        pass  # the host is gone or gave up; it reports the job itself
    return 1
