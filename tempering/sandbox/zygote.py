"""The host's handle on one started sandbox: its bwrap process and the zygote inside it.

`Zygote.spawn` starts bwrap (as the unprivileged sandbox uid when Tempering runs as root) with
one end of a SOCK_SEQPACKET pair; `wait_ready` waits for the zygote's HELLO, which also tells
the host the zygote's pid in the host's pid namespace. `dispatch` hands one job's descriptors
over. `close` ends the sandbox: closing the control socket makes the zygote exit, and bwrap's
init then takes every process of the sandbox with it; a zygote that does not exit is killed
through a pidfd. A zygote serves one job at a time; the pool decides which.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import tempfile

from tempering.sandbox.guest import wire


class ZygoteError(RuntimeError):
    """A sandbox could not be started or stopped answering; the message says what it printed."""


class Zygote:
    def __init__(self, proc: subprocess.Popen, ctrl: socket.socket, errlog) -> None:
        self.proc = proc
        self.ctrl = ctrl
        self.errlog = errlog
        self.pid: int | None = None  # the zygote's host pid, known after wait_ready
        self.reusable = False  # set by the pool for its members: only they prepare ahead
        self._pidfd: int | None = None

    @classmethod
    def spawn(cls, argv: list[str], run_as: tuple[int, int] | None) -> "Zygote":
        host_end, guest_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        host_end.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        errlog = tempfile.TemporaryFile()
        creds = {"user": run_as[0], "group": run_as[1], "extra_groups": []} if run_as else {}
        try:
            proc = subprocess.Popen(
                [a.replace("{fd}", str(guest_end.fileno())) for a in argv],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=errlog,
                pass_fds=[guest_end.fileno()], close_fds=True, env={"PATH": os.defpath}, **creds)
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
            msg, ancdata, _, _ = self.ctrl.recvmsg(16, socket.CMSG_SPACE(12))
        except OSError as e:  # socket.timeout is an OSError
            self._fail(f"sandbox did not start within {timeout_s} s ({e})")
        pid = wire.sender_pid(ancdata)
        if msg != wire.HELLO or pid is None:
            self._fail("sandbox failed to start")
        self.pid = pid
        self._pidfd = os.pidfd_open(pid)
        self.ctrl.settimeout(5.0)  # dispatch is one small message; never wait forever

    def _fail(self, what: str) -> None:
        tail = self.stderr_tail()
        self.close()
        raise ZygoteError(f"{what}: {tail}")

    def dispatch(self, fds: list[int]) -> None:
        wire.send_fds(self.ctrl, wire.JOB, fds)

    def prepare_next(self) -> None:
        """Ask the zygote to make the next job's init now (the job in flight is in its cgroup);
        a one-shot zygote has no next job."""
        if self.reusable:
            self.ctrl.send(wire.PREPARE)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
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
