"""Helpers for the sandbox tests: requests, host-side process checks and the clean-state check."""

from __future__ import annotations

import json
import os
import shutil
import time

import pytest

from tempering.sandbox import ExecRequest

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None,
                                 reason="bubblewrap is not installed (apt-get install -y bubblewrap)")
SECRET = "tempering-host-secret-3c1f9a"


def py(code: str, **kw) -> ExecRequest:
    return ExecRequest(command=("python3", "-c", code), **kw)


def last_logged(sandbox) -> dict:
    """The sandbox's telemetry line for its latest job."""
    with open(sandbox._log.path) as f:
        return json.loads(f.read().splitlines()[-1])


def _stat(pid: str) -> tuple[str, int, int]:
    """(state, parent pid, start time in clock ticks) from /proc/PID/stat."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()  # after the name, which may hold spaces
    return fields[0], int(fields[1]), int(fields[19])


def sandbox_processes(sandbox) -> dict[int, int]:
    """Live host processes of one isolated backend, pid -> start time: its bwrap processes
    (their command lines name its private staging directory) and every descendant of them
    (zygotes, prepared inits, jobs and whatever those fork: each bwrap is the init of a pid
    namespace, so even an orphaned job process stays below it). Other sandboxes on this
    machine, another test run's included, are not counted; neither is the backend's reaper,
    which names the staging directory too but runs nothing of a sandbox. Zombies are left out:
    they run nothing, and bwrap's exited inits are reparented to the host's init, which reaps
    them when it gets round to it."""
    staging = str(sandbox._staging.root).encode()
    reaper = sandbox._reaper.pid if sandbox._reaper is not None else None
    children: dict[int, list[int]] = {}
    seen: dict[int, tuple[str, int]] = {}
    roots = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                state, ppid, start = _stat(entry)
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    cmdline = f.read()
            except (OSError, ValueError, IndexError):
                continue  # it ended meanwhile
            pid = int(entry)
            children.setdefault(ppid, []).append(pid)
            seen[pid] = (state, start)
            if staging in cmdline and pid != reaper:
                roots.append(pid)
    found, todo = {}, roots
    while todo:
        pid = todo.pop()
        if pid not in found:
            found[pid] = seen[pid]
            todo.extend(children.get(pid, ()))
    return {pid: start for pid, (state, start) in found.items() if state != "Z"}


def still_running(procs: dict[int, int]) -> list[int]:
    """Those of `procs` (pid -> start time, from `sandbox_processes`) that still run: the same
    pid with the same start time, so a pid the kernel has since given to another process of
    this busy machine does not count."""
    alive = []
    for pid, start in procs.items():
        try:
            state, _, now = _stat(str(pid))
        except (OSError, ValueError, IndexError):
            continue
        if now == start and state != "Z":
            alive.append(pid)
    return alive


def host_cmdlines_containing(marker: str) -> list[int]:
    hits = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    if marker.encode() in f.read():
                        hits.append(int(entry))
            except OSError:
                continue
    return hits


def host_pids_named(name: str) -> list[int]:
    """Host pids whose process name (/proc/PID/comm, 15 characters at most) is `name`: a job
    names itself to tell the host it has got somewhere."""
    hits = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/comm") as f:
                    if f.read().rstrip("\n") == name:
                        hits.append(int(entry))
            except OSError:
                continue
    return hits


def wait_until(predicate, timeout_s: float = 10.0) -> bool:
    """Poll until `predicate` holds; the timeout only guards against a hang (it costs nothing
    when the predicate comes true), so it is generous."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


CLEAN_CHECK = r"""
import os, json
pids = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
def lines(p):
    with open(p) as f:
        return [l for l in f.read().splitlines()[1:] if l.strip()]
print(json.dumps({
    "workspace": os.listdir("/workspace"), "tmp": os.listdir("/tmp"), "shm": os.listdir("/dev/shm"),
    "pids": pids, "self": os.getpid(),
    "sysv": lines("/proc/sysvipc/shm") + lines("/proc/sysvipc/msg") + lines("/proc/sysvipc/sem"),
    "abstract": [l for l in open("/proc/net/unix").read().splitlines() if "@" in l],
}))
"""


def assert_next_job_clean(sandbox) -> None:
    """The next job sees an empty workspace, /tmp and /dev/shm, no other processes and no
    IPC objects or abstract sockets left by anyone."""
    r = sandbox.run(py(CLEAN_CHECK))
    assert r.ok, r
    state = json.loads(r.stdout)
    assert state["workspace"] == [] and state["tmp"] == [] and state["shm"] == [], state
    assert set(state["pids"]) <= {1, state["self"]}, state
    assert state["sysv"] == [] and state["abstract"] == [], state
