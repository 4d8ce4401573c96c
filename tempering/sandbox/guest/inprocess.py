"""Starting a Python job as a fork of its init instead of an exec of a new interpreter.

The init is already confined when the job arrives: its own namespaces, the job's cgroup, no
capabilities (bounding set included), no_new_privs, the seccomp filter, the job's rlimits, the
workspace as working directory. A fork inherits all of that. `start` forks; the child then
does what posix_spawn and exec would otherwise do for the job's process: it closes the init's
socket to the host and every descriptor but the job's stdio on 0-2, starts a new session,
becomes dumpable again (as exec makes a process) so that it can give up the init's
protection from the OOM killer, takes the interpreter's name, restores the signal
dispositions a fresh interpreter sets up, and then `fresh.become` and `pymain.run` make the
interpreter a new one and run the job. The child never returns into the init's code. Which
jobs qualify is `pycommand`'s business, not this module's.
"""

from __future__ import annotations

import os
import signal
import socket

from . import fresh, pymain, syscalls
from .pycommand import Invocation

_MAX_FD = 1 << 20  # above any descriptor the init holds (the kernel's own ceiling on nr_open)


def start(inv: Invocation, program: str, env: dict[str, str], stdio: list[int], sock: socket.socket,
          base: fresh.Baseline) -> int:
    """Fork the job's process; returns its pid. The caller closes its copies of `stdio`."""
    return syscalls.fork_into(_child, inv, program, env, stdio, sock, base)


def _child(inv: Invocation, program: str, env: dict[str, str], stdio: list[int], sock: socket.socket,
           base: fresh.Baseline) -> int:
    sock.close()  # the init's line to the host: the job must never hold it
    os.setsid()
    for target, fd in enumerate(stdio):
        os.dup2(fd, target)
    _close_all_but_stdio()
    # A forked process stays non-dumpable like the init, which makes its /proc files root's
    # and refuses its own oom_score_adj; an exec would have reset this.
    syscalls.prctl(syscalls.PR_SET_DUMPABLE, 1)
    _unprotect_from_oom()
    syscalls.set_name(os.path.basename(program))
    # The dispositions CPython sets at start-up; the zygote reset SIGINT to the default, and
    # SIGPIPE and SIGXFSZ are still ignored from the guest interpreter's own start.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.pthread_sigmask(signal.SIG_SETMASK, ())
    main = fresh.become(base, inv, program, env)
    # What the interpreter starts with is its own, not the job's: finalizing leaves it be.
    pymain.run(inv, main, frozenset(base.modules if inv.flags["no_site"] else base.site_modules))
    return 1  # not reached: pymain.run exits


def _close_all_but_stdio() -> None:
    os.closerange(3, _MAX_FD)  # close_range(2): one call however many are open


def _unprotect_from_oom() -> None:
    """The host shields the init from the OOM killer and a fork inherits that; the job must
    not, or an out-of-memory job would leave nothing to kill but its init."""
    try:
        fd = os.open("/proc/self/oom_score_adj", os.O_WRONLY | os.O_CLOEXEC)
        try:
            os.write(fd, b"0")
        finally:
            os.close(fd)
    except OSError:
        pass  # as for an exec'd job: the host's deadline then ends an out-of-memory job
