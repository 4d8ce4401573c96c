"""`PrivateHead`: the Ray head node behind `RayRuntime("local")`, started with Ray's own CLI
(`ray start --head --block`) in a session of its own.

`ray.init` would start the head's processes (GCS, raylet, workers) in the trainer's process group,
so Ctrl-C in a terminal or `kill -TERM -PGID` from a scheduler killed them at once and the run
ended in errors instead of its clean finish. In a session of their own they do not get that
signal: the run's `StopRequest` alone decides how the run ends, and `stop` ends the head. The
`ray start` process stops the processes it started on SIGTERM; what is left of its session is
killed after it. If the trainer dies without `stop` (SIGKILL), the kernel sends the head SIGTERM
(Linux; elsewhere it outlives the trainer until `ray stop`).

It does not import Ray (the head is a subprocess; `runtime.ray` connects to it), and only starts
and stops that one head: it manages no other node and never runs `ray stop`, which would end
every Ray instance on the machine.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

from tempering.runtime.interface import Stall

_STARTED = "Ray runtime started"  # what `ray start` prints once its processes are up
_PR_SET_PDEATHSIG = 1


def _free_ports(count: int) -> list[int]:
    """Ports free now (held together, so they differ); one may be taken before Ray binds it."""
    socks = [socket.socket() for _ in range(count)]
    try:
        for s in socks:
            s.bind(("", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _die_with_parent() -> None:
    """In the head's process before exec: SIGTERM when the trainer dies (strictly: when the thread
    that started the head ends, so start it from one that lives as long as the run)."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


class PrivateHead:
    """A head on this machine at `address` (node IP `node_ip`), with `num_cpus` CPUs (Ray's count
    when None), custom `resources` and Ray's authentication mode `auth` (RAY_AUTH_MODE, the one
    the caller connects with); up within `timeout` s or `Stall`, until `stop`."""

    def __init__(self, node_ip: str, num_cpus: int | None, resources: dict[str, float] | None, timeout: float,
                 auth: str):
        port, dashboard, client, agent = _free_ports(4)
        # fixed defaults (8265, 10001, 52365) would clash with any other Ray instance on the machine
        cmd = [sys.executable, "-m", "ray.scripts.scripts", "start", "--head", "--block", f"--port={port}",
               f"--node-ip-address={node_ip}", "--include-dashboard=false", f"--dashboard-port={dashboard}",
               f"--ray-client-server-port={client}", f"--dashboard-agent-listen-port={agent}",
               "--disable-usage-stats"]
        if num_cpus is not None:
            cmd.append(f"--num-cpus={num_cpus}")
        if resources:
            cmd.append(f"--resources={json.dumps(resources)}")
        # no drain wait on stop: Ray's default waits up to 30 s for drain-aware components, which a
        # run has none of
        env = {**os.environ, "RAY_AUTH_MODE": auth, "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0"}
        self.address = f"{node_ip}:{port}"
        self._log = tempfile.TemporaryFile()
        self._proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
                                      env=env, start_new_session=True, preexec_fn=_die_with_parent)
        try:
            self._wait_started(timeout)
        except BaseException:
            self.stop()
            raise

    def _wait_started(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while _STARTED not in self.output():
            if self._proc.poll() is not None:
                raise RuntimeError(f"the private Ray head exited with code {self._proc.returncode}:\n"
                                   f"{self.output()[-3000:]}")
            if time.monotonic() > deadline:
                raise Stall(f"the private Ray head: not started within {timeout:g} s\n{self.output()[-3000:]}")
            time.sleep(0.05)

    def output(self) -> str:
        """What `ray start` printed so far."""
        self._log.seek(0)
        return self._log.read().decode(errors="replace")

    def stop(self, timeout: float = 30.0) -> None:
        """End the head and every process of its session (idempotent)."""
        if self._log.closed:
            return
        if self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
        try:
            # the session's id is the head's pid: workers it did not stop, or a head stuck stopping
            os.killpg(self._proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self._proc.wait()
        self._log.close()
