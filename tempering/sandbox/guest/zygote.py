"""The zygote: a long-lived process inside one bwrap sandbox that makes job inits by forking.

At start it makes itself pid 1 of a pid namespace its own user namespace owns (a fork after
unshare), because only there may it return to its own pid namespace after creating one for a
job. On each PREPARE from the host it makes a socket pair, unshares a fresh pid namespace for
its next child, forks the job's init (`job.run`, pid 1 of that namespace, which unshares its
own mount and IPC namespaces), returns to its own pid namespace, and sends the host its end
of the pair (PREPARED). The host then talks to that init directly: it moves the init into
the job's cgroup while the init is idle and, later, hands it the job. So the zygote, its fork
and the cgroup move are all off the job's critical path, and nothing of one job is visible to
the next. The zygote never sees job data, so its memory, which every init inherits, holds
nothing of earlier jobs. It exits when the host closes the control socket; killing it kills
every job of the sandbox (their pid namespaces are nested in its own).

Run inside the sandbox as: python3 -I -S -B -c '<put the staging dir on sys.path>; from guest
import zygote; raise SystemExit(zygote.main(sys.argv))' CONTROL_FD DISK_MB [late]. "late"
makes inits that confine themselves only once their job has arrived, so that they can mount
the filesystems it asks for (`job`, `rootfs`).
"""

from __future__ import annotations

import gc
import os
import signal
import socket
import sys

from . import job, seccomp, syscalls, wire


def main(argv: list[str]) -> int:
    ctrl = socket.socket(fileno=int(argv[1]))
    disk_mb = int(argv[2])
    confine_late = argv[3:4] == ["late"]
    syscalls.prctl(syscalls.PR_SET_DUMPABLE, 0)
    syscalls.empty_bounding_set()
    program = seccomp.build_program()  # built once; every init inherits it through fork
    syscalls.unshare(syscalls.CLONE_NEWPID)
    child = syscalls.fork_into(_serve, ctrl, program, disk_mb, confine_late)
    ctrl.close()
    _, status = os.waitpid(child, 0)
    return os.waitstatus_to_exitcode(status)


def _serve(ctrl: socket.socket, program: bytes, disk_mb: int, confine_late: bool) -> int:
    """Pid 1 of the zygote's own pid namespace: serve PREPAREs until the host goes away."""
    # Pid 1 ignores signals it has no handler for, but Python installs one for SIGINT. Reset
    # here, for this process and every job's init forked from it: otherwise a job could kill
    # its init with `kill -INT 1` and turn its run into a sandbox_error, never penalised.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    own_pidns = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
    # Everything allocated so far is permanent: frozen objects are never traversed by the
    # collector, so forked children do not copy the pages holding them just to scan them.
    gc.freeze()
    ctrl.send(wire.HELLO)
    while True:
        tag, fds = wire.recv_fds(ctrl, 1)
        _reap_exited()
        if not tag:
            return 0  # the host closed the control socket: the sandbox ends
        if tag != wire.PREPARE or fds:
            print(f"zygote: unexpected message {tag!r} with {len(fds)} descriptors", file=sys.stderr)
            return 2
        host_end, init_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            syscalls.unshare(syscalls.CLONE_NEWPID)  # for the next child only
            try:
                syscalls.fork_into(_init, ctrl, host_end, own_pidns, init_end, program, disk_mb, confine_late)
            finally:
                syscalls.setns(own_pidns, syscalls.CLONE_NEWPID)
        except OSError as e:  # no init will speak on this socket: say why on its behalf
            job.report_error(init_end, f"cannot create the job's pid namespace: {e}")
        init_end.close()
        wire.send_fds(ctrl, wire.PREPARED, [host_end.fileno()])
        host_end.close()


def _init(ctrl: socket.socket, host_end: socket.socket, own_pidns: int, init_end: socket.socket,
          program: bytes, disk_mb: int, confine_late: bool) -> int:
    """The new pid namespace's pid 1: let go of the zygote's descriptors, become the job's init."""
    gc.disable()  # a short-lived process: collecting would only copy pages
    ctrl.close()
    host_end.close()
    os.close(own_pidns)
    return job.run(init_end, program, disk_mb, confine_late)


def _reap_exited() -> None:
    """We are pid 1 here: every init that ended is our zombie until we wait for it."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
