"""Where things are inside a sandbox: the workspace, and the paths the sandbox itself owns, which
neither a job's mounts (`sandbox.request.Mount`) nor the host paths bound read-only into it
(`sandbox.ro_paths`) may lie at or under. A leaf that imports nothing of Tempering, so that the
config (which the sandbox package imports) and the sandbox read the same constants. The guest
package (stdlib only, staged into the sandbox) keeps its own copies; tests/test_sandbox_paths.py
holds them equal. It does not mount anything (`sandbox.bwrap`, `sandbox.guest`)."""

from __future__ import annotations

WORKSPACE = "/workspace"  # a job's working directory: a fresh tmpfs per job, or a session's mount
GUEST_ROOT = "/opt/tempering"  # the staged guest package
TOOLCHAIN_MOUNT = "/opt/toolchain"  # a session's read-only toolchain
LAYER_MOUNT = "/opt/layer"  # a job's package layer (`ExecRequest.layer`)
NEWROOT = "/.newroot"  # where a session's job init assembles its own root
LAYERS = "/.layers"  # every built package layer, hidden from the jobs

# What the sandbox mounts or builds itself. /sys is not mounted at all: a sandbox has none, and
# binding the host's would show its devices and kernel settings.
SANDBOX_OWN = ("/proc", "/dev", "/sys", "/tmp", GUEST_ROOT, TOOLCHAIN_MOUNT, LAYER_MOUNT, NEWROOT, LAYERS)
# A mount may be the workspace (a session's workspace is one); a host path bound read-only may
# not: every job's fresh workspace would hide it.
MOUNT_RESERVED = SANDBOX_OWN
RO_PATH_RESERVED = (*SANDBOX_OWN, WORKSPACE)


def within(path: str, roots: tuple[str, ...]) -> bool:
    """`path` is one of `roots` or lies under one."""
    return any(path == r or path.startswith(r + "/") for r in roots)
