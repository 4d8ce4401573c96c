"""The host's handle on one started sandbox: its bwrap process, the zygote inside it, and the
next job's init, prepared ahead.

`Zygote.spawn` starts bwrap (as the unprivileged sandbox uid when Tempering runs as root) with
one end of a SOCK_SEQPACKET pair; `wait_ready` waits for the zygote's HELLO, which also tells
the host the zygote's pid in the host's pid namespace. `prepare` asks for the next job's init,
receives the socket to it, learns its pid from its READY and moves it into a fresh cgroup,
shielded from the OOM killer; the result is a `Prepared` that one job consumes. `close` ends
the sandbox: closing the control socket makes the zygote exit, and bwrap's init then takes
every process of the sandbox with it; a zygote that does not exit is killed through a pidfd.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import tempfile
from dataclasses import dataclass

from tempering.sandbox.bwrap import as_host_user
from tempering.sandbox.cgroups import CgroupError, JobGroup, Tree
from tempering.sandbox.guest import wire


class ZygoteError(RuntimeError):
    """A sandbox could not be started or stopped answering; the message says what it printed."""


@dataclass
class Prepared:
    """A job's init, idle in its own fresh namespaces and already inside `group`."""

    sock: socket.socket
    pid: int  # the init's pid in the host's pid namespace
    group: JobGroup

    def discard(self) -> None:
        self.sock.close()  # the init sees the end of its socket and exits
        self.group.tree.release(self.group)


class Zygote:
    def __init__(self, proc: subprocess.Popen, ctrl: socket.socket, errlog) -> None:
        self.proc = proc
        self.ctrl = ctrl
        self.errlog = errlog
        self.pid: int | None = None  # the zygote's host pid, known after wait_ready
        self.next: Prepared | None = None
        self._pidfd: int | None = None

    @classmethod
    def spawn(cls, argv: list[str], run_as: tuple[int, int] | None) -> "Zygote":
        host_end, guest_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        host_end.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        errlog = tempfile.TemporaryFile()
        try:
            proc = subprocess.Popen(
                [a.replace("{fd}", str(guest_end.fileno())) for a in argv],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=errlog,
                pass_fds=[guest_end.fileno()], close_fds=True, env={"PATH": os.defpath},
                # Its own process group: a Ctrl-C or a scheduler's SIGTERM to the run's group is the
                # run's to handle (it finishes cleanly, using its warm sandboxes); the sandbox ends
                # when the host closes it, or when the host dies and the control socket closes.
                process_group=0, **as_host_user(run_as))
        except OSError as e:
            host_end.close()
            errlog.close()
            raise ZygoteError(f"cannot start bwrap: {e}") from None
        finally:
            guest_end.close()
        return cls(proc, host_end, errlog)

    def wait_ready(self, timeout_s: float) -> None:
        self.ctrl.settimeout(timeout_s)
        try:
            msg, pid = wire.recv_tag_and_pid(self.ctrl)
        except OSError as e:  # socket.timeout is an OSError
            self._fail(f"sandbox did not start within {timeout_s} s ({e})")
        if msg != wire.HELLO or pid is None:
            self._fail("sandbox failed to start")
        self.pid = pid
        self._pidfd = os.pidfd_open(pid)

    def prepare(self, tree: Tree, timeout_s: float) -> None:
        """Make the next job's init and move it into a fresh cgroup (slow when the machine is
        busy: a cgroup move waits for an RCU grace period, so this runs off the critical path)."""
        assert self.next is None, "the prepared init has not been used"
        self.ctrl.settimeout(timeout_s)
        # Failures raise without closing: a job may still be running in this sandbox, and the
        # pool drops the zygote once that job is over.
        try:
            self.ctrl.send(wire.PREPARE)
            tag, fds = wire.recv_fds(self.ctrl, 1)
        except OSError as e:
            raise ZygoteError(f"sandbox stopped answering ({e}): {self.stderr_tail()}") from None
        if tag != wire.PREPARED or len(fds) != 1:
            raise ZygoteError(f"sandbox answered {tag!r} to PREPARE: {self.stderr_tail()}")
        sock = socket.socket(fileno=fds[0])
        try:
            pid = _await_ready(sock, timeout_s)
            group = tree.group()
        except (OSError, ZygoteError, CgroupError, wire.ProtocolError) as e:
            sock.close()
            raise ZygoteError(f"the next job's init failed: {e}: {self.stderr_tail()}") from None
        try:
            group.add(pid)
            _protect_from_oom(pid)
        except OSError as e:
            sock.close()
            tree.release(group)
            raise ZygoteError(f"cannot move the job's init into its cgroup: {e}") from None
        self.next = Prepared(sock, pid, group)

    def take(self) -> Prepared:
        prepared, self.next = self.next, None
        assert prepared is not None, "prepare() first"
        return prepared

    def alive(self) -> bool:
        return self.proc.poll() is None

    def _fail(self, what: str) -> None:
        tail = self.stderr_tail()
        self.close()
        raise ZygoteError(f"{what}: {tail}")

    def close(self) -> None:
        if self.next is not None:
            self.next.discard()
            self.next = None
        self.ctrl.close()
        try:
            self.proc.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            if self._pidfd is not None:
                try:
                    signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            try:
                self.proc.wait(timeout=2.0)
            except subprocess.TimeoutExpired:
                self.proc.kill()  # last resort; the cgroup tree's close kills what is left
                self.proc.wait()
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None
        self.errlog.close()

    def stderr_tail(self, limit: int = 2000) -> str:
        try:
            self.errlog.seek(0, os.SEEK_END)
            size = self.errlog.tell()
            self.errlog.seek(max(0, size - limit))
            return self.errlog.read().decode(errors="replace").strip() or "(no output)"
        except (OSError, ValueError):
            return "(output unavailable)"


def _await_ready(sock: socket.socket, timeout_s: float) -> int:
    """The init's host pid from its READY (the kernel translates it), or ZygoteError."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
    sock.settimeout(timeout_s)
    msg, pid = wire.recv_tag_and_pid(sock)
    if msg == wire.ERROR:
        raise ZygoteError(str(wire.recv_frame(sock, 1 << 16).get("error", "unknown error")))
    if msg != wire.READY or pid is None:
        raise ZygoteError(f"expected READY with credentials, got {msg!r}")
    return pid


def _protect_from_oom(pid: int) -> None:
    """The init shares the job's cgroup; the OOM killer must pick one of the job's processes
    (the init sets theirs back to 0), or the job would end as a sandbox_error. Lowering the
    score needs CAP_SYS_RESOURCE: without it (Tempering not root) the init is unprotected."""
    try:
        with open(f"/proc/{pid}/oom_score_adj", "w") as f:
            f.write("-1000")
    except PermissionError:
        pass
