"""Sessions leave nothing behind: many at once on two cores, and a process killed while its
sessions are running commands. Judged from the host, and only by what this test's own sandbox
made, since other test runs on this machine start and end sandboxes meanwhile: its bwrap
processes (named by its private staging directory on their command lines: once they are gone,
so is every namespace, mount and tmpfs inside), its cgroup subtree, host mounts of its staging
directory or subtree, and the staging directory itself."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from sandbox_helpers import host_cmdlines_containing, needs_bwrap, wait_until
from tempering.config import SandboxConfig
from tempering.sandbox import SessionSpec, make_sandbox

pytestmark = needs_bwrap


def mounts_of(*paths: str) -> list[str]:
    """Host mounts (this process's mount namespace) whose mount point or source lies at or under
    one of `paths`: a sandbox's own staging directory and cgroup subtree, which no other
    sandbox's mounts name. Inside bwrap, a sandbox's mounts never show here."""
    def under(p: str) -> bool:
        return any(p == q or p.startswith(q.rstrip("/") + "/") for q in paths)
    hits = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            root, point = left.split()[3:5]
            source = right.split()[1] if len(right.split()) > 1 else ""
            if under(point) or under(root) or under(source):
                hits.append(line.strip())
    return hits


def busy_groups(tree_dirs: list[str]) -> dict[str, int]:
    """Job groups of a tree that hold processes, with how many."""
    out = {}
    for base in tree_dirs:
        for name in os.listdir(base):
            if not name.startswith("job-"):
                continue
            try:
                n = len(Path(base, name, "cgroup.procs").read_text().split())
            except OSError:  # removed while we looked (ENOENT, or ENODEV from a group being torn down)
                continue
            if n:
                out[name] = n
    return out


def one_session(sandbox, i: int, mark: str) -> list[str]:
    with sandbox.open_session(SessionSpec(workdir="/app", disk_mb=4)) as s:
        outs = []
        for step in range(3):
            r = s.run(("bash", "-c", f"echo {i}-{step} >> log; ls /app; (exec -a {mark} sleep 30 &); cat log | wc -l"))
            assert r.ok, r
            outs.append(r.stdout)
        assert s.workspace.read("log") == "".join(f"{i}-{k}\n" for k in range(3)).encode()
        return outs


def test_32_concurrent_sessions_leak_nothing():
    sandbox = make_sandbox(SandboxConfig(workers=4, disk_mb=16))
    tree, staging = sandbox._tree.dirs, str(sandbox._staging.root)
    mark = f"bg-{os.getpid()}-leak"
    try:
        with ThreadPoolExecutor(32) as pool:
            outs = list(pool.map(lambda i: one_session(sandbox, i, mark), range(32)))
        # Each saw its own workspace only, and its background sleep died with its command.
        assert all(o == ["log\n1\n", "log\n2\n", "log\n3\n"] for o in outs), outs
        assert host_cmdlines_containing(mark) == []
        # What is left running are the warm sandboxes and their prepared inits: one per warm
        # sandbox of either pool, each alone in its job group. A finished job's group may hold
        # its exiting init for a moment (longer on a loaded machine), so this waits for that.
        def settled() -> bool:
            busy = busy_groups(tree)
            return all(n == 1 for n in busy.values()) and len(busy) <= 2 * 4
        assert wait_until(settled, 30), busy_groups(tree)
        assert mounts_of(staging, *tree) == []
    finally:
        sandbox.close()
    assert host_cmdlines_containing(staging) == []  # no bwrap of this sandbox: no namespace left
    assert mounts_of(staging, *tree) == []
    assert not any(os.path.exists(d) for d in tree) and not os.path.exists(staging)


CHILD = textwrap.dedent("""
    import json, sys, threading
    from tempering.config import SandboxConfig
    from tempering.sandbox import SessionSpec, make_sandbox
    sandbox = make_sandbox(SandboxConfig(workers=2, disk_mb=8))
    sessions = [sandbox.open_session(SessionSpec(workdir="/app")) for _ in range(3)]
    for i, s in enumerate(sessions):
        threading.Thread(target=s.run, args=(("bash", "-c", f"exec -a orphan-{MARK}-{i} sleep 600"),),
                         kwargs={"time_limit_s": 600}, daemon=True).start()
    print(json.dumps({"tree": sandbox._tree.dirs, "staging": str(sandbox._staging.root)}), flush=True)
    threading.Event().wait()
""")


def test_a_process_that_dies_with_open_sessions_leaks_nothing():
    mark = f"{os.getpid()}-died"
    sleepers = [f"orphan-{mark}-{i}\x00600\x00" for i in range(3)]  # their argv (the child's own holds "{i}")
    child = subprocess.Popen([sys.executable, "-c", CHILD.replace("{MARK}", mark)], stdout=subprocess.PIPE, text=True)
    try:
        where = json.loads(child.stdout.readline())
        assert wait_until(lambda: all(host_cmdlines_containing(s) for s in sleepers), 60)
        assert mounts_of(where["staging"], *where["tree"]) == []
    finally:
        child.send_signal(signal.SIGKILL)  # no close(), no finally blocks, no atexit
        child.wait()
    assert wait_until(lambda: not any(host_cmdlines_containing(s) for s in sleepers), 30)
    assert wait_until(lambda: host_cmdlines_containing(where["staging"]) == [], 30)
    # The cgroup subtree and the staging directory: removed by the sandbox's reaper.
    assert wait_until(lambda: not any(os.path.exists(d) for d in where["tree"]), 30), where
    assert wait_until(lambda: not os.path.exists(where["staging"]), 30)
    assert mounts_of(where["staging"], *where["tree"]) == []
