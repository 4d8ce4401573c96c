"""The start-up check: can this machine isolate untrusted code, and if not, what is missing.

`probe` looks for bubblewrap, a seccomp-capable x86_64 kernel, the guest interpreter, usable
cgroups (v2 delegated or v1), and actually starts a throw-away bwrap with a user namespace as
the sandbox uid. It raises `SandboxUnavailable` naming every missing piece and the two ways
forward. It does not start the sandbox itself or fall back to anything.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
from dataclasses import dataclass

from tempering.config import SandboxConfig
from tempering.errors import UserError
from tempering.sandbox import hierarchy
from tempering.sandbox.bwrap import GUEST_UID, as_host_user


class SandboxUnavailable(UserError):
    """Isolation was asked for but this machine cannot provide it; the message says what is
    missing (the user installs it, or chooses the unisolated backend explicitly)."""


@dataclass(frozen=True)
class Capabilities:
    bwrap: str
    bwrap_version: tuple[int, ...]
    cgroups: hierarchy.Detection
    run_as: tuple[int, int] | None  # (uid, gid) to start bwrap as; None: as this process's user


def probe(cfg: SandboxConfig) -> Capabilities:
    missing = []
    bwrap = shutil.which(cfg.bwrap)
    if bwrap is None:
        missing.append(f"bubblewrap: {cfg.bwrap!r} is not on PATH (install the Debian/Ubuntu "
                       "package 'bubblewrap', or set sandbox.bwrap to its path)")
    machine = platform.machine()
    if machine != "x86_64":
        missing.append(f"seccomp filter: only x86_64 is supported, this machine is {machine}")
    if not _kernel_has_seccomp():
        missing.append("seccomp: the kernel does not report seccomp support in /proc/self/status")
    if not os.path.isfile(cfg.guest_python):
        missing.append(f"guest interpreter: {cfg.guest_python} does not exist "
                       "(install python3, or set sandbox.guest_python)")
    detection = hierarchy.detect()
    if not detection.version:
        missing.append(f"cgroups: {detection.problem}")
    run_as = (cfg.uid, cfg.uid) if os.geteuid() == 0 else None
    version: tuple[int, ...] = ()
    if bwrap is not None:
        version = _bwrap_version(bwrap)
        problem = _try_user_namespace(bwrap, run_as)
        if problem:
            missing.append(f"user namespaces: {problem}")
    if missing:
        raise SandboxUnavailable(
            "the isolated sandbox (sandbox.backend = 'bwrap') cannot run on this machine:\n  - "
            + "\n  - ".join(missing)
            + "\nFix the above, or set sandbox.backend = 'unisolated' and "
            "sandbox.allow_unisolated = true to run model-written code WITHOUT isolation.")
    return Capabilities(bwrap, version, detection, run_as)


def _kernel_has_seccomp() -> bool:
    with open("/proc/self/status") as f:
        return any(line.startswith("Seccomp:") for line in f)


def _bwrap_version(bwrap: str) -> tuple[int, ...]:
    out = subprocess.run([bwrap, "--version"], capture_output=True, text=True, timeout=10).stdout
    m = re.search(r"(\d+)\.(\d+)\.(\d+)", out)
    return tuple(int(x) for x in m.groups()) if m else ()


def _try_user_namespace(bwrap: str, run_as: tuple[int, int] | None) -> str:
    """'' if bwrap can create a sandbox with a user namespace as the sandbox user, else why not."""
    uid = str(GUEST_UID)
    argv = [bwrap, "--unshare-all", "--unshare-user", "--uid", uid, "--gid", uid, "--ro-bind", "/", "/", "--", "true"]
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=10, env={}, **as_host_user(run_as))
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"running {bwrap} failed: {e}"
    if r.returncode != 0:
        return (f"bwrap could not create a sandbox ({r.stderr.strip() or f'exit {r.returncode}'}); "
                "check kernel.unprivileged_userns_clone / user.max_user_namespaces")
    return ""
