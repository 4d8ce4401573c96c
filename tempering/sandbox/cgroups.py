"""Per-job resource control through cgroups: v2 where its controllers are delegated, else v1.

`detect` finds, at start-up, which version this process can use: cgroup v2 if our own v2 group
offers memory, pids and cpu and is writable; otherwise v1 hierarchies for memory, pids, cpu and
cpuacct (freezer used when present), each at our own group. `Tree` is one sandbox's subtree
under our own group: a `zygotes` group for the long-lived processes and one `JobGroup` per job
with a memory limit (swap included), a pid limit and a CPU quota. A job group reports peak
memory, CPU time and OOM kills, and kills everything in it (freeze, SIGKILL, thaw) so that no
process outlives its job. Nothing here decides limits: the caller passes them.
"""

from __future__ import annotations

import errno
import itertools
import os
import re
import secrets
import signal
import time
from dataclasses import dataclass, field
from typing import Mapping

V1_REQUIRED = ("memory", "pids", "cpu", "cpuacct")
V1_OPTIONAL = ("freezer",)
V2_REQUIRED = ("memory", "pids", "cpu")
CPU_PERIOD_US = 100_000
_PREFIX = "tempering-"


class CgroupError(RuntimeError):
    """A cgroup operation failed in a way that leaves the job's limits unenforced."""


@dataclass(frozen=True)
class Detection:
    version: int  # 1 or 2; 0 when neither is usable
    dirs: Mapping[str, str] = field(default_factory=dict)  # controller (v2: "unified") -> our group's dir
    problem: str = ""  # why neither is usable, naming what is missing


@dataclass(frozen=True)
class Stats:
    peak_bytes: int
    cpu_s: float
    oom_kills: int


def detect(proc: str = "/proc/self") -> Detection:
    mounts = _mounts(_read(f"{proc}/mountinfo"))
    own = _own_groups(_read(f"{proc}/cgroup"))
    v2 = _detect_v2(mounts, own)
    if v2.version:
        return v2
    v1 = _detect_v1(mounts, own)
    if v1.version:
        return v1
    return Detection(0, problem=f"{v2.problem}; {v1.problem}")


def _mounts(mountinfo: str) -> list[tuple[str, str, str, set[str]]]:
    """(fstype, mount root, mount point, super options) of every cgroup mount."""
    out = []
    for line in mountinfo.splitlines():
        left, _, right = line.partition(" - ")
        fields, rfields = left.split(), right.split()
        if len(fields) < 5 or len(rfields) < 3 or rfields[0] not in ("cgroup", "cgroup2"):
            continue
        unescape = lambda s: re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), s)
        out.append((rfields[0], unescape(fields[3]), unescape(fields[4]), set(rfields[2].split(","))))
    return out


def _own_groups(text: str) -> dict[str, str]:
    """Controller -> our group's path; "" is the v2 (unified) hierarchy."""
    own = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            for ctrl in parts[1].split(",") if parts[1] else [""]:
                own[ctrl] = parts[2]
    return own


def _group_dir(mount_root: str, mount_point: str, path: str) -> str | None:
    root = mount_root.rstrip("/")
    if path != root and not path.startswith(root + "/"):
        return None  # this mount does not contain our group
    return mount_point.rstrip("/") + path[len(root):].rstrip("/")


def _detect_v2(mounts, own) -> Detection:
    for fstype, root, point, _ in mounts:
        if fstype != "cgroup2" or "" not in own:
            continue
        d = _group_dir(root, point, own[""])
        if d is None or not os.path.isdir(d):
            continue
        have = set(_read(f"{d}/cgroup.controllers").split())
        missing = [c for c in V2_REQUIRED if c not in have]
        if missing:
            return Detection(0, problem=f"cgroup v2 at {point} does not delegate {', '.join(missing)} "
                                        f"to {own['']} (it offers: {', '.join(sorted(have)) or 'none'})")
        if not os.access(d, os.W_OK):
            return Detection(0, problem=f"cgroup v2 group {d} is not writable by this user")
        return Detection(2, {"unified": d})
    return Detection(0, problem="no cgroup v2 hierarchy holds this process")


def _detect_v1(mounts, own) -> Detection:
    dirs, missing = {}, []
    for ctrl in V1_REQUIRED + V1_OPTIONAL:
        for fstype, root, point, opts in mounts:
            if fstype == "cgroup" and ctrl in opts and ctrl in own:
                d = _group_dir(root, point, own[ctrl])
                if d is not None and os.path.isdir(d) and os.access(d, os.W_OK):
                    dirs[ctrl] = d
                    break
        if ctrl not in dirs and ctrl in V1_REQUIRED:
            missing.append(ctrl)
    if missing:
        return Detection(0, problem=f"no writable cgroup v1 hierarchy for {', '.join(missing)}")
    return Detection(1, dirs)


class Tree:
    """One sandbox's cgroup subtree. Thread-safe: job names come from an atomic counter."""

    def __init__(self, detection: Detection, name: str) -> None:
        assert detection.version in (1, 2), "use detect() and check .problem first"
        self.detection = detection
        self.name = name
        self._ids = itertools.count()
        self._bases = {c: f"{d}/{name}" for c, d in detection.dirs.items()}
        self.zygotes = JobGroup(self, "zygotes")

    @classmethod
    def create(cls, detection: Detection) -> "Tree":
        for d in detection.dirs.values():
            _sweep_stale(d)
        tree = cls(detection, f"{_PREFIX}{os.getpid()}-{secrets.token_hex(3)}")
        try:
            for base in _unique(tree._bases):
                os.mkdir(base)
            if detection.version == 2:
                parent = detection.dirs["unified"]
                enable = " ".join(f"+{c}" for c in V2_REQUIRED)
                if not set(V2_REQUIRED) <= set(_read(f"{parent}/cgroup.subtree_control").split()):
                    _write(f"{parent}/cgroup.subtree_control", enable)
                _write(f"{tree._bases['unified']}/cgroup.subtree_control", enable)
            tree.zygotes.create(None)
        except OSError as e:
            tree.close()
            raise CgroupError(f"cannot create the sandbox's cgroups under {detection.dirs}: {e}") from None
        return tree

    def job(self, memory_bytes: int, pids: int, cpus: float) -> "JobGroup":
        group = JobGroup(self, f"job-{next(self._ids)}")
        try:
            group.create((memory_bytes, pids, cpus))
        except OSError as e:
            group.close()
            raise CgroupError(f"cannot create the job's cgroup: {e}") from None
        return group

    def adopt(self, pid: int) -> None:
        """Move a long-lived sandbox process (a zygote) into the tree, so close() ends it."""
        self.zygotes.add(pid)

    def close(self) -> None:
        groups = []
        for base in _unique(self._bases):
            if os.path.isdir(base):
                groups += [n for n in os.listdir(base) if os.path.isdir(f"{base}/{n}")]
        for name in sorted(set(groups)):
            JobGroup(self, name).close()
        for base in _unique(self._bases):
            _rmdir(base)


class JobGroup:
    """A leaf group, the same name in every controller's hierarchy."""

    def __init__(self, tree: Tree, name: str) -> None:
        self.v2 = tree.detection.version == 2
        self.dirs = {c: f"{b}/{name}" for c, b in tree._bases.items()}

    def create(self, limits: tuple[int, int, float] | None) -> None:
        """Make the directories; `limits` is (memory bytes, pids, cpus), None for no limits."""
        for d in _unique(self.dirs):
            os.mkdir(d)
        if limits is not None:
            self._limit(*limits)

    def _limit(self, memory_bytes: int, pids: int, cpus: float) -> None:
        quota = max(1000, int(cpus * CPU_PERIOD_US))
        if self.v2:
            d = self.dirs["unified"]
            _write(f"{d}/memory.max", memory_bytes)
            _write_if_exists(f"{d}/memory.swap.max", 0)
            _write(f"{d}/pids.max", pids)
            _write(f"{d}/cpu.max", f"{quota} {CPU_PERIOD_US}")
        else:
            _write(f"{self.dirs['memory']}/memory.limit_in_bytes", memory_bytes)
            _write_if_exists(f"{self.dirs['memory']}/memory.memsw.limit_in_bytes", memory_bytes)
            _write(f"{self.dirs['pids']}/pids.max", pids)
            _write(f"{self.dirs['cpu']}/cpu.cfs_period_us", CPU_PERIOD_US)
            _write(f"{self.dirs['cpu']}/cpu.cfs_quota_us", quota)

    def add(self, pid: int) -> None:
        for d in _unique(self.dirs):
            _write(f"{d}/cgroup.procs", pid)

    def procs(self) -> list[int]:
        d = self.dirs["unified" if self.v2 else "pids"]
        try:
            return [int(p) for p in _read(f"{d}/cgroup.procs").split()]
        except FileNotFoundError:
            return []

    def stats(self) -> Stats:
        if self.v2:
            d = self.dirs["unified"]
            peak = _read_int(f"{d}/memory.peak", default=0)
            cpu_us = _keyed(f"{d}/cpu.stat", "usage_usec")
            return Stats(peak, cpu_us / 1e6, _keyed(f"{d}/memory.events", "oom_kill"))
        peak = _read_int(f"{self.dirs['memory']}/memory.max_usage_in_bytes", default=0)
        cpu_ns = _read_int(f"{self.dirs['cpuacct']}/cpuacct.usage", default=0)
        return Stats(peak, cpu_ns / 1e9, _keyed(f"{self.dirs['memory']}/memory.oom_control", "oom_kill"))

    def kill(self, timeout_s: float = 5.0) -> None:
        """SIGKILL every process in the group and wait until it is empty. Frozen first, so a
        fork bomb cannot add processes between reading the list and signalling it."""
        if not self.procs():
            return
        if self.v2 and os.path.exists(f"{self.dirs['unified']}/cgroup.kill"):
            _write(f"{self.dirs['unified']}/cgroup.kill", 1)
        else:
            self._freeze(True)
            for pid in self.procs():
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            self._freeze(False)
        deadline = time.monotonic() + timeout_s
        while self.procs():
            if time.monotonic() > deadline:
                raise CgroupError(f"processes {self.procs()} survived SIGKILL for {timeout_s} s")
            time.sleep(0.001)

    def _freeze(self, frozen: bool) -> None:
        if self.v2:
            _write(f"{self.dirs['unified']}/cgroup.freeze", int(frozen))
            return
        d = self.dirs.get("freezer")
        if d is None:
            return  # without a freezer the kill loop in kill() still converges under pids.max
        state = "FROZEN" if frozen else "THAWED"
        _write(f"{d}/freezer.state", state)
        deadline = time.monotonic() + 1.0
        while frozen and _read(f"{d}/freezer.state").strip() != state and time.monotonic() < deadline:
            time.sleep(0.0005)

    def close(self) -> None:
        """Kill what is left and remove the group's directories."""
        self.kill()
        for d in _unique(self.dirs):
            _rmdir(d)


def _sweep_stale(parent: str) -> None:
    """Remove subtrees left by Tempering processes that died without closing them."""
    for name in os.listdir(parent):
        m = re.fullmatch(rf"{_PREFIX}(\d+)-[0-9a-f]+", name)
        if m and not _alive(int(m.group(1))):
            for child in os.listdir(f"{parent}/{name}"):
                if os.path.isdir(f"{parent}/{name}/{child}"):
                    _kill_pids(f"{parent}/{name}/{child}/cgroup.procs")
                    _rmdir(f"{parent}/{name}/{child}")
            _rmdir(f"{parent}/{name}")


def _kill_pids(procs_file: str) -> None:
    for pid in _read(procs_file).split():
        try:
            os.kill(int(pid), signal.SIGKILL)
        except ProcessLookupError:
            pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _rmdir(path: str, timeout_s: float = 2.0) -> None:
    """rmdir, retrying while the kernel finishes releasing exited tasks (EBUSY)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            os.rmdir(path)
            return
        except FileNotFoundError:
            return
        except OSError as e:
            if e.errno != errno.EBUSY or time.monotonic() > deadline:
                raise CgroupError(f"cannot remove cgroup {path}: {e}") from None
            time.sleep(0.001)


def _unique(dirs: Mapping[str, str]) -> list[str]:
    return list(dict.fromkeys(dirs.values()))  # co-mounted v1 controllers share a directory


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()


def _read_int(path: str, default: int) -> int:
    try:
        return int(_read(path).split()[0])
    except (FileNotFoundError, IndexError, ValueError):
        return default


def _keyed(path: str, key: str) -> int:
    """The value of `key` in a flat-keyed file such as memory.events or cpu.stat."""
    try:
        for line in _read(path).splitlines():
            k, _, v = line.partition(" ")
            if k == key:
                return int(v)
    except (FileNotFoundError, ValueError):
        pass
    return 0


def _write(path: str, value: object) -> None:
    with open(path, "w") as f:
        f.write(str(value))


def _write_if_exists(path: str, value: object) -> None:
    if os.path.exists(path):
        _write(path, value)
