"""The zygote: a long-lived process inside one bwrap sandbox that starts jobs by forking.

Ahead of each job it prepares the job's init: a child that unshares fresh mount, pid and IPC
namespaces and forks `job.run` as pid 1 of the new pid namespace, which mounts the job's
filesystems, drops every privilege and waits. When a JOB message arrives with its four
descriptors, the zygote passes them to the prepared init; on PREPARE (sent by the host once
the job is in its cgroup: preparing earlier would slow the cgroup move, which waits for
concurrent forks) it prepares the next one while the job runs. So no fork of the interpreter
is on a job's critical path, and nothing of one job is visible to the next. The zygote never reads job data (the init does), so its memory, which every init
inherits, holds nothing of earlier jobs. It exits when the host closes the control socket, and
the whole sandbox with it. Limits and deadlines are the host's business.

Run inside the sandbox as: python3 -I -S -B -c '<put the staging dir on sys.path>; from guest
import zygote; raise SystemExit(zygote.main(sys.argv))' CONTROL_FD DISK_MB
"""

from __future__ import annotations

import gc
import os
import socket
import sys

from . import job, seccomp, syscalls, wire

_NAMESPACES = syscalls.CLONE_NEWNS | syscalls.CLONE_NEWPID | syscalls.CLONE_NEWIPC


def main(argv: list[str]) -> int:
    ctrl = socket.socket(fileno=int(argv[1]))
    disk_mb = int(argv[2])
    syscalls.prctl(syscalls.PR_SET_DUMPABLE, 0)
    syscalls.empty_bounding_set()
    program = seccomp.build_program()  # built once; every init inherits it through fork
    # Everything allocated so far is permanent: frozen objects are never traversed by the
    # collector, so forked children do not copy the pages holding them just to scan them.
    gc.freeze()
    prepared = _prepare(ctrl, program, disk_mb)
    ctrl.send(wire.HELLO)
    while True:
        tag, fds = wire.recv_fds(ctrl, wire.JOB_FDS)
        if not tag:
            return 0  # the host closed the control socket: the sandbox ends
        if tag == wire.PREPARE and not fds:
            prepared = prepared or _prepare(ctrl, program, disk_mb)
            continue
        if tag != wire.JOB or len(fds) != wire.JOB_FDS:
            print(f"zygote: unexpected message {tag!r} with {len(fds)} descriptors", file=sys.stderr)
            return 2
        prepared = prepared or _prepare(ctrl, program, disk_mb)
        if isinstance(prepared, str):
            job.report_error(socket.socket(fileno=os.dup(fds[0])), prepared)
        else:
            wire.send_fds(prepared, wire.JOB, fds)
            prepared.close()
        prepared = None
        for fd in fds:
            os.close(fd)


def _prepare(ctrl: socket.socket, program: bytes, disk_mb: int) -> socket.socket | str:
    """Start the next job's init; returns the socket to hand it a job, or why it failed."""
    mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    pid = syscalls.fork_into(_enter_namespaces, ctrl, mine, theirs, program, disk_mb)
    theirs.close()
    _, status = os.waitpid(pid, 0)
    if status != 0:
        mine.setblocking(False)
        try:
            why = mine.recv(4096).decode(errors="replace")
        except BlockingIOError:
            why = f"the zygote's child failed (wait status {status})"
        mine.close()
        return why
    return mine


def _enter_namespaces(ctrl: socket.socket, mine: socket.socket, theirs: socket.socket,
                      program: bytes, disk_mb: int) -> int:
    """In the zygote's child: unshare, fork the job's init as pid 1 of the new pid namespace
    (it is then reparented to bwrap's init), and exit."""
    gc.disable()  # short-lived processes: collecting would only copy pages
    ctrl.close()
    mine.close()
    try:
        syscalls.unshare(_NAMESPACES)
    except OSError as e:
        theirs.send(f"cannot create the job's namespaces: {e}".encode())
        return 1
    syscalls.fork_into(job.run, theirs, program, disk_mb)
    return 0
