"""cgroup hierarchy detection from /proc files (v1, v2, neither) and job groups on a fake v2 tree
and on this machine's real hierarchy: limits written, processes killed, usage read back (per
job and for the whole tree), used groups removed in the background."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

from sandbox_helpers import wait_until

from tempering.sandbox import cgroups, hierarchy

V1_MOUNTS = """\
32 31 0:29 / {root}/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / {root}/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
35 31 0:32 / {root}/memory rw,relatime - cgroup cgroup rw,memory
37 31 0:34 / {root}/freezer rw,relatime - cgroup cgroup rw,freezer
39 31 0:36 / {root}/pids rw,relatime - cgroup cgroup rw,pids
41 31 0:38 / {root}/unified rw,relatime - cgroup2 cgroup2 rw
"""
V1_SELF = "8:pids:/\n4:memory:/job/abc\n2:cpuacct:/\n1:cpu:/\n6:freezer:/\n0::/\n"


def fake_proc(tmp_path, mountinfo: str, self_cgroup: str):
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "mountinfo").write_text(mountinfo)
    (proc / "cgroup").write_text(self_cgroup)
    return str(proc)


def test_detects_v1_when_v2_has_no_controllers(tmp_path):
    root = tmp_path / "cg"
    for c in ("cpu", "cpuacct", "memory/job/abc", "freezer", "pids", "unified"):
        (root / c).mkdir(parents=True)
    (root / "unified" / "cgroup.controllers").write_text("")
    d = hierarchy.detect(fake_proc(tmp_path, V1_MOUNTS.format(root=root), V1_SELF))
    assert d.version == 1
    assert d.dirs["memory"] == f"{root}/memory/job/abc" and d.dirs["pids"] == f"{root}/pids"


def fake_v2(tmp_path, own: str, controllers: str):
    group = tmp_path / "cg" / own.strip("/")
    group.mkdir(parents=True)
    (group / "cgroup.controllers").write_text(controllers)
    mountinfo = f"30 1 0:26 / {tmp_path / 'cg'} rw - cgroup2 cgroup2 rw\n"
    return hierarchy.detect(fake_proc(tmp_path, mountinfo, f"0::{own}\n")), group


def test_detects_v2_when_delegated(tmp_path):
    d, group = fake_v2(tmp_path, "/user.slice", "cpuset cpu io memory pids\n")
    assert d.version == 2 and d.dirs == {"unified": str(group)}


def test_escaped_mount_points_are_decoded(tmp_path):
    group = tmp_path / "cg root" / "user.slice"
    group.mkdir(parents=True)
    (group / "cgroup.controllers").write_text("cpu memory pids\n")
    point = str(tmp_path / "cg root").replace(" ", "\\040")  # as mountinfo writes a space
    d = hierarchy.detect(fake_proc(tmp_path, f"30 1 0:26 / {point} rw - cgroup2 cgroup2 rw\n", "0::/user.slice\n"))
    assert d.dirs == {"unified": str(group)}


def test_reports_what_is_missing(tmp_path):
    d, _ = fake_v2(tmp_path, "/", "cpu\n")
    assert d.version == 0
    assert "memory, pids" in d.problem and "cgroup v1" in d.problem


def limited(tree, memory_bytes, pids, cpus):
    group = tree.group()
    group.limit(memory_bytes, pids, cpus)
    return group


V2_FILES = ("cgroup.procs", "cgroup.subtree_control", "cgroup.kill", "memory.max", "memory.swap.max",
            "pids.max", "cpu.max", "cpu.weight")


def test_v2_job_group_on_a_fake_tree(tmp_path, monkeypatch):
    real_mkdir, real_rmdir = os.mkdir, os.rmdir

    def cgroupfs_mkdir(path, *args):  # like cgroupfs: a group comes and goes with its interface files
        real_mkdir(path, *args)
        for name in V2_FILES:
            Path(path, name).write_text("")

    def cgroupfs_rmdir(path, *args):
        for f in Path(path).iterdir():
            if f.is_file():
                f.unlink()
        real_rmdir(path, *args)

    monkeypatch.setattr(os, "mkdir", cgroupfs_mkdir)
    monkeypatch.setattr(os, "rmdir", cgroupfs_rmdir)
    parent = tmp_path / "cg"
    parent.mkdir()
    (parent / "cgroup.subtree_control").write_text("memory pids cpu")
    (parent / "memory.swap.max").write_text("max")
    tree = cgroups.Tree.create(hierarchy.Detection(2, {"unified": str(parent)}), workers=3)
    group = limited(tree, 64 << 20, 16, 0.5)
    d = Path(group.dirs["unified"])
    assert (d / "memory.max").read_text() == str(64 << 20)
    assert (d / "pids.max").read_text() == "16"
    assert (d / "cpu.max").read_text() == "50000 100000"
    assert (d / "memory.swap.max").read_text() == "0"
    assert (parent / tree.name / "cgroup.subtree_control").read_text() == "+memory +pids +cpu"
    assert (parent / tree.name / "cpu.weight").read_text() == "300"
    (d / "memory.peak").write_text("1048576\n")
    (d / "cpu.stat").write_text("usage_usec 250000\nuser_usec 1\n")
    (d / "memory.events").write_text("low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n")
    assert group.stats() == cgroups.Stats(1 << 20, 0.25, 1)
    (d / "cgroup.procs").write_text("")
    assert group.procs() == []
    tree.close()
    assert not (parent / tree.name).exists()


@pytest.fixture
def real_tree():
    detection = hierarchy.detect()
    if not detection.version:
        pytest.fail(f"this machine offers no usable cgroups: {detection.problem}")
    tree = cgroups.Tree.create(detection)
    yield tree
    tree.close()


def test_real_job_group_limits_kills_and_measures(real_tree):
    group = limited(real_tree, 32 << 20, 8, 1.0)
    code = "import sys\nsys.stdin.read(1)\nx = bytearray(8 << 20)\nprint('allocated', flush=True)\nwhile True: pass"
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        group.add(proc.pid)
        proc.stdin.write(b"x")
        proc.stdin.flush()
        assert group.procs() == [proc.pid]
        assert proc.stdout.readline() == b"allocated\n"  # in the group, not a sleep that hopes so
        assert wait_until(lambda: group.stats().cpu_s > 0.05, timeout_s=30)  # the busy loop is counted
        stats = group.stats()
        assert stats.peak_bytes >= 8 << 20 and stats.cpu_s > 0.05 and stats.oom_kills == 0
        group.kill()
        assert proc.wait(timeout=5) == -9 and group.procs() == []
    finally:
        proc.kill()
        proc.wait()
    real_tree.release(group)
    assert wait_until(lambda: not any(os.path.exists(d) for d in group.dirs.values()))
    assert real_tree.cpu_s() >= stats.cpu_s  # the tree still counts what its removed group used


def test_real_job_group_enforces_pids(real_tree):
    group = limited(real_tree, 64 << 20, 4, 1.0)
    code = ("import os, time\nn = 0\nfor _ in range(20):\n    try:\n        if os.fork() == 0:\n"
            "            os.close(1); time.sleep(5); os._exit(0)\n        n += 1\n    except OSError:\n        pass\n"
            "print(n)")
    proc = subprocess.Popen([sys.executable, "-c", f"import sys; sys.stdin.read(1)\n{code}"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    group.add(proc.pid)
    out, _ = proc.communicate(b"x", timeout=10)
    assert int(out) == 3  # four pids in all: the parent and three children
    real_tree.release(group)  # its sleeping children are killed once they linger
    assert wait_until(lambda: not any(os.path.exists(d) for d in group.dirs.values()))


def test_stale_trees_of_dead_processes_are_swept():
    detection = hierarchy.detect()
    parent = next(iter(detection.dirs.values()))
    # A pid no process can have; a suffix of its own, so that another test run doing the same
    # meanwhile does not collide with it.
    stale = os.path.join(parent, f"tempering-999999999-{secrets.token_hex(3)}")
    os.mkdir(stale)
    os.mkdir(os.path.join(stale, "job-0"))
    tree = cgroups.Tree.create(detection)
    try:
        assert not os.path.exists(stale)
    finally:
        tree.close()
