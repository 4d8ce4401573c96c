"""Cleaning up after a host process that died with its sandboxes open.

When the process that owns an isolated backend is killed, its zygotes see their control
sockets close and exit, and bwrap takes every job with it; what the kernel does not remove is
the backend's cgroup subtree and its staging directory. `Reaper.start` runs a small watcher,
a fresh standard-library interpreter (never a fork of this process, which may hold threads
and locks), in its own session so that a Ctrl-C to the run's process group leaves it be. It
waits for the end of a pipe that only its owner holds: when the owner dies, or closes the
backend (`stop`), it kills whatever is left in the subtree, removes the groups and deletes
the staging directory. After a clean close there is nothing left and it just exits. A later
backend would also sweep stale subtrees (`cgroups.Tree.create`); this one does not wait for it.
"""

from __future__ import annotations

import os
import subprocess
import sys

# Standard library only, as small as possible: it runs for the whole life of the backend.
_WATCH = r"""
import os, shutil, signal, sys, time
sys.stdin.buffer.read()  # returns when the owner's end closes: it died, or closed the backend
dirs, staging = sys.argv[1:-1], sys.argv[-1]
def groups(base):
    try:
        return [os.path.join(base, n) for n in os.listdir(base) if os.path.isdir(os.path.join(base, n))]
    except OSError:
        return []
deadline = time.monotonic() + 10
for base in dirs:
    for group in groups(base) + [base]:
        while time.monotonic() < deadline:
            try:
                pids = open(os.path.join(group, "cgroup.procs")).read().split()
            except OSError:
                pids = []
            for pid in pids:
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except OSError:
                    pass
            try:
                os.rmdir(group)
                break
            except FileNotFoundError:
                break
            except OSError:
                time.sleep(0.01)
shutil.rmtree(staging, ignore_errors=True)
"""


class Reaper:
    def __init__(self, proc: subprocess.Popen) -> None:
        self._proc = proc

    @classmethod
    def start(cls, cgroup_dirs: list[str], staging: str, python: str = sys.executable) -> "Reaper":
        """Watch `cgroup_dirs` (the subtree's directory in each hierarchy; their child groups are
        removed first) and `staging` on behalf of this process."""
        proc = subprocess.Popen([python, "-I", "-S", "-c", _WATCH, *cgroup_dirs, staging],
                                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                close_fds=True, start_new_session=True)
        return cls(proc)

    @property
    def pid(self) -> int:
        return self._proc.pid

    def stop(self, timeout_s: float = 15.0) -> None:
        """After a clean close: let it check once (it finds nothing) and wait for it to exit."""
        self._proc.stdin.close()
        try:
            self._proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.kill(self._proc.pid, 9)
            self._proc.wait()
