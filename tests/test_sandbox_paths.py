"""tempering.sandbox_paths: one list of the paths the sandbox owns, which both the config's
`sandbox.ro_paths` and a job's `Mount`s are refused at; the copies that code running inside the
sandbox keeps (stdlib only, it cannot import Tempering) agree with it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tempering import sandbox_paths as paths
from tempering.config import ConfigError, SandboxConfig
from tempering.sandbox import bwrap
from tempering.sandbox.guest import job as guest_job
from tempering.sandbox.guest import rootfs
from tempering.sandbox.request import DEFAULT_WORKDIR, Mount
from tempering.sandbox.toolchain import shims


def test_the_module_is_a_leaf():
    tree = ast.parse(Path(paths.__file__).read_text())
    imported = [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)] + \
        [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    assert not [m for m in imported if m.split(".")[0] == "tempering"], imported


def test_the_copies_inside_the_sandbox_agree():
    assert (guest_job.WORKSPACE, rootfs.NEWROOT, rootfs.LAYERS, rootfs.LAYER_MOUNT, shims.LAYER) == (
        paths.WORKSPACE, paths.NEWROOT, paths.LAYERS, paths.LAYER_MOUNT, paths.LAYER_MOUNT)
    assert (bwrap.GUEST_ROOT, bwrap.TOOLCHAIN_MOUNT, bwrap.NEWROOT, bwrap.LAYERS) == (
        paths.GUEST_ROOT, paths.TOOLCHAIN_MOUNT, paths.NEWROOT, paths.LAYERS)
    assert DEFAULT_WORKDIR == "/workspace"


@pytest.mark.parametrize("own", ["/proc", "/dev", "/sys", "/tmp", "/opt/tempering", "/opt/toolchain", "/opt/layer",
                                 "/.newroot", "/.layers"])
def test_neither_a_mount_nor_a_bound_host_path_may_lie_in_what_the_sandbox_owns(own):
    for path in (own, own + "/sub"):
        with pytest.raises(ValueError, match="sandbox's own"):
            Mount(path)
        with pytest.raises(ConfigError, match="sandbox.ro_paths"):
            SandboxConfig(ro_paths=(path,))


def test_the_workspace_may_be_a_mount_but_not_a_bound_host_path():
    """A session's workspace is a mount there; every job's fresh workspace would hide a host path."""
    assert Mount("/workspace", writable=True).path == "/workspace"
    with pytest.raises(ConfigError, match="sandbox.ro_paths"):
        SandboxConfig(ro_paths=("/workspace/venv",))
    for fine in ("/srv/venv", "/opt/venv", "/workspaces", "/system"):
        assert SandboxConfig(ro_paths=(fine,)).ro_paths == (fine,)
        assert Mount(fine).path == fine
