"""Helpers for the sandbox tests: requests, host-side process checks, the clean-state check, and
a sandbox wrapper that checks which path each Python job took."""

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
SANDBOX_UID = 65534


def py(code: str, **kw) -> ExecRequest:
    return ExecRequest(command=("python3", "-c", code), **kw)


def last_logged(sandbox) -> dict:
    """The sandbox's telemetry line for its latest job."""
    with open(sandbox._log.path) as f:
        return json.loads(f.read().splitlines()[-1])


class OnePath:
    """A sandbox whose Python jobs must all run in a fork of the guest's interpreter
    (`in_process`) or all be exec'd; `run` checks each one's telemetry."""

    def __init__(self, sandbox, in_process: bool) -> None:
        self.sandbox, self.in_process = sandbox, in_process

    def run(self, request: ExecRequest):
        result = self.sandbox.run(request)
        if request.command[0] == "python3":
            assert last_logged(self.sandbox)["in_process"] == self.in_process, (request, result)
        return result


def sandbox_processes() -> list[int]:
    """Live host processes running as the sandbox's host uid (zygotes, prepared inits, jobs).
    Zombies are left out: they run nothing, and bwrap's exited inits are reparented to the
    host's init, which reaps them when it gets round to it."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/status") as f:
                    fields = dict(line.split(":", 1) for line in f if ":" in line)
            except OSError:
                continue
            if int(fields.get("Uid", "-1 ").split()[0]) == SANDBOX_UID and not fields.get("State", "").strip().startswith("Z"):
                pids.append(int(entry))
    return pids


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
