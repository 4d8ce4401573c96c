"""Finding the cgroup hierarchies this process may use: v2 where memory, pids and cpu are
delegated to our group, otherwise v1 hierarchies for memory, pids, cpu and cpuacct (freezer
used when present), each at our own group. Read from /proc/self/mountinfo and
/proc/self/cgroup at start-up; the result names the directories or says what is missing.
It creates nothing: `cgroups.Tree` does.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Mapping

V1_REQUIRED = ("memory", "pids", "cpu", "cpuacct")
V1_OPTIONAL = ("freezer",)
V2_REQUIRED = ("memory", "pids", "cpu")


@dataclass(frozen=True)
class Detection:
    version: int  # 1 or 2; 0 when neither is usable
    dirs: Mapping[str, str] = field(default_factory=dict)  # controller (v2: "unified") -> our group's dir
    problem: str = ""  # why neither is usable, naming what is missing


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
        out.append((rfields[0], _unescape(fields[3]), _unescape(fields[4]), set(rfields[2].split(","))))
    return out


def _unescape(path: str) -> str:
    """A mountinfo path field with its octal escapes (\\040 for a space, ...) decoded."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), path)


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


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()
