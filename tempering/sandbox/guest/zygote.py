"""The zygote: a long-lived process inside one bwrap sandbox that makes job inits by forking.

On each PREPARE from the host it makes a socket pair and forks a child that unshares fresh
mount, pid and IPC namespaces and forks the job's init (`job.run`) as pid 1 of the new pid
namespace; it sends the host its end of the pair (PREPARED) and goes back to waiting. The
host then talks to that init directly: it moves the init into the job's cgroup while the
init is still idle and, later, hands it the job. So the zygote, its forks and the cgroup
move are all off the job's critical path, and nothing of one job is visible to the next.
The zygote never sees job data, so its memory, which every init inherits, holds nothing of
earlier jobs. It exits when the host closes the control socket, and the sandbox with it.

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
    ctrl.send(wire.HELLO)
    while True:
        tag, fds = wire.recv_fds(ctrl, 1)
        if not tag:
            return 0  # the host closed the control socket: the sandbox ends
        if tag != wire.PREPARE or fds:
            print(f"zygote: unexpected message {tag!r} with {len(fds)} descriptors", file=sys.stderr)
            return 2
        host_end, init_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        pid = syscalls.fork_into(_enter_namespaces, ctrl, host_end, init_end, program, disk_mb)
        _, status = os.waitpid(pid, 0)
        if status != 0:  # no init will speak on this socket: say why on its behalf
            job.report_error(init_end, "cannot create the job's namespaces (see the zygote's log)")
        init_end.close()
        wire.send_fds(ctrl, wire.PREPARED, [host_end.fileno()])
        host_end.close()


def _enter_namespaces(ctrl: socket.socket, host_end: socket.socket, init_end: socket.socket,
                      program: bytes, disk_mb: int) -> int:
    """In the zygote's child: unshare, fork the job's init as pid 1 of the new pid namespace
    (it is then reparented to bwrap's init), and exit."""
    gc.disable()  # short-lived processes: collecting would only copy pages
    ctrl.close()
    host_end.close()
    syscalls.unshare(_NAMESPACES)
    syscalls.fork_into(job.run, init_end, program, disk_mb)
    return 0
