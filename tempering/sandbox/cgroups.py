"""Per-job resource control through cgroups (v2 or v1, as `hierarchy.detect` found).

`Tree` is one sandbox's subtree under our own group: a `zygotes` group for the long-lived
processes and one `JobGroup` per job with a memory limit (swap included), a pid limit and a
CPU quota. A job group reports peak memory, CPU time and OOM kills, and kills everything in
it (freeze, SIGKILL, thaw) so that no process outlives its job. A background thread keeps a
few empty groups ready and removes used ones, so neither mkdir nor rmdir is on a job's
critical path. Nothing here decides limits: the caller passes them.
"""

from __future__ import annotations

import errno
import itertools
import os
import queue
import re
import secrets
import signal
import sys
import threading
import time
from dataclasses import dataclass
from typing import Mapping

from tempering.sandbox.hierarchy import V2_REQUIRED, Detection

CPU_PERIOD_US = 100_000  # the kernel's default period for a new group
_PREFIX = "tempering-"
_STOCK = 4  # empty job groups kept ready
_LINGER_S = 0.2  # how long a used group's last processes may take to exit before being killed


class CgroupError(RuntimeError):
    """A cgroup operation failed in a way that leaves the job's limits unenforced."""


@dataclass(frozen=True)
class Stats:
    peak_bytes: int
    cpu_s: float
    oom_kills: int


class Tree:
    """One sandbox's cgroup subtree. Thread-safe."""

    def __init__(self, detection: Detection, name: str) -> None:
        assert detection.version in (1, 2), "use hierarchy.detect() and check .problem first"
        self.detection = detection
        self.name = name
        self._ids = itertools.count()
        self._bases = {c: f"{d}/{name}" for c, d in detection.dirs.items()}
        # Swap is limited too where the kernel accounts it (looked up once, in our own group).
        own = detection.dirs["unified" if detection.version == 2 else "memory"]
        swap = "memory.swap.max" if detection.version == 2 else "memory.memsw.limit_in_bytes"
        self.swap_file = swap if os.path.exists(f"{own}/{swap}") else None
        self.zygotes = JobGroup(self, "zygotes")
        self._stock: queue.SimpleQueue[JobGroup] = queue.SimpleQueue()
        self._used: list[tuple[float, JobGroup]] = []
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._closed = False
        self._upkeep = threading.Thread(target=self._keep, name=f"{name}-upkeep", daemon=True)

    @classmethod
    def create(cls, detection: Detection, workers: int = 1) -> "Tree":
        """`workers` concurrent jobs: the tree's CPU weight is that many ordinary processes', so
        a job contending with the host's own processes gets what a bare process would."""
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
                _write(f"{tree._bases['unified']}/cpu.weight", min(10_000, 100 * workers))
            else:
                _write(f"{tree._bases['cpu']}/cpu.shares", 1024 * workers)
            tree.zygotes.create()
        except OSError as e:
            tree.close()
            raise CgroupError(f"cannot create the sandbox's cgroups under {dict(detection.dirs)}: {e}") from None
        tree._upkeep.start()
        return tree

    def group(self) -> "JobGroup":
        """A fresh, empty group without limits yet (`JobGroup.limit`). Give it back with `release`."""
        try:
            group = self._stock.get_nowait()
        except queue.Empty:
            try:
                group = self._new_group()
            except OSError as e:
                raise CgroupError(f"cannot create a job's cgroup: {e}") from None
        self._wake.set()  # refill the stock
        return group

    def _new_group(self) -> "JobGroup":
        group = JobGroup(self, f"job-{next(self._ids)}")
        group.create()
        return group

    def release(self, group: "JobGroup") -> None:
        """The job is over: its group is emptied (killing what lingers) and removed, in the background."""
        with self._lock:
            idle = not self._used
            self._used.append((time.monotonic(), group))
        if idle:  # otherwise a pass is due within 10 ms anyway
            self._wake.set()

    @property
    def dirs(self) -> list[str]:
        """The subtree's directory in each hierarchy (one for v2)."""
        return _unique(self._bases)

    def adopt(self, pid: int) -> None:
        """Move a long-lived sandbox process (a zygote) into the tree, so close() ends it."""
        self.zygotes.add(pid)

    def _keep(self) -> None:
        while True:
            with self._lock:
                busy = bool(self._used)
            self._wake.wait(timeout=0.01 if busy else 1.0)
            self._wake.clear()
            if self._closed:
                return
            try:
                self._remove_used()
                while self._stock.qsize() < _STOCK and not self._closed:
                    self._stock.put(self._new_group())
            except (OSError, CgroupError) as e:
                print(f"tempering sandbox: cgroup upkeep: {e}", file=sys.stderr)
                self._wake.wait(timeout=1.0)  # retry later; close() removes whatever is left

    def _remove_used(self) -> None:
        with self._lock:
            used, self._used = self._used, []
        keep = []
        for released, group in used:
            if group.procs():
                if time.monotonic() - released < _LINGER_S:
                    keep.append((released, group))
                    continue
                group.kill()
            group.remove()
        with self._lock:
            self._used = keep + self._used

    def cpu_s(self) -> float:
        """CPU time used so far by the sandbox's processes, zygotes and jobs (ended ones too:
        a removed group's usage stays counted in its parent)."""
        if self.detection.version == 2:
            return _keyed(f"{self._bases['unified']}/cpu.stat", "usage_usec") / 1e6
        return _read_int(f"{self._bases['cpuacct']}/cpuacct.usage", default=0) / 1e9

    def close(self) -> None:
        """Stop the upkeep, kill every process in the tree and remove it."""
        self._closed = True
        self._wake.set()
        if self._upkeep.is_alive():
            self._upkeep.join()
        groups = []
        for base in _unique(self._bases):
            if os.path.isdir(base):
                groups += [n for n in os.listdir(base) if os.path.isdir(f"{base}/{n}")]
        for name in sorted(set(groups)):
            group = JobGroup(self, name)
            group.kill()
            group.remove()
        for base in _unique(self._bases):
            _rmdir(base)


class JobGroup:
    """A leaf group, the same name in every controller's hierarchy."""

    def __init__(self, tree: Tree, name: str) -> None:
        self.tree = tree
        self.v2 = tree.detection.version == 2
        self.dirs = {c: f"{b}/{name}" for c, b in tree._bases.items()}
        self._swap_file = tree.swap_file

    def create(self) -> None:
        for d in _unique(self.dirs):
            os.mkdir(d)

    def limit(self, memory_bytes: int, pids: int, cpus: float) -> None:
        """Memory (swap included), processes and CPU bandwidth (period: the default 100 ms)."""
        quota = max(1000, int(cpus * CPU_PERIOD_US))
        mem = self.dirs["unified" if self.v2 else "memory"]
        _write(f"{mem}/{'memory.max' if self.v2 else 'memory.limit_in_bytes'}", memory_bytes)
        if self._swap_file:
            _write(f"{mem}/{self._swap_file}", 0 if self.v2 else memory_bytes)  # v1 counts memory+swap
        _write(f"{self.dirs['unified' if self.v2 else 'pids']}/pids.max", pids)
        if self.v2:
            _write(f"{mem}/cpu.max", f"{quota} {CPU_PERIOD_US}")
        else:
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

    def kill(self, timeout_s: float = 5.0, spare: int | None = None) -> None:
        """SIGKILL every process in the group but `spare` and wait until they are gone. Frozen
        first, so a fork bomb cannot add processes between reading the list and signalling it."""
        if not [p for p in self.procs() if p != spare]:
            return
        if spare is None and self.v2 and os.path.exists(f"{self.dirs['unified']}/cgroup.kill"):
            _write(f"{self.dirs['unified']}/cgroup.kill", 1)
        else:
            self._freeze(True)
            try:
                for pid in self.procs():
                    if pid != spare:
                        try:
                            os.kill(pid, signal.SIGKILL)
                        except ProcessLookupError:
                            pass
            finally:
                self._freeze(False)
        deadline = time.monotonic() + timeout_s
        while [p for p in self.procs() if p != spare]:
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

    def remove(self) -> None:
        """Remove the (empty) group's directories."""
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


# Plain os calls rather than open(): a job touches a dozen cgroup files on its critical path,
# and a buffered text file costs several times the system calls it wraps.
def _read(path: str) -> str:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return os.read(fd, 1 << 16).decode()
    finally:
        os.close(fd)


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
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, str(value).encode())
    finally:
        os.close(fd)
