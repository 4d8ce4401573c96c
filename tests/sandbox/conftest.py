"""Session fixtures for the sandbox tests: one isolated sandbox for the whole session (started
once, so the suite stays fast) and a host directory with a root-only secret bound read-only
into it. Helpers that judge jobs from the host side are in sandbox_helpers.py."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from sandbox_helpers import SECRET
from tempering.config import SandboxConfig
from tempering.sandbox import make_sandbox


@pytest.fixture(scope="session")
def secret_dir():
    """/var/tmp/<random>/ with secret.txt (root-only 0600) and public.txt (0644). Not under
    pytest's tmp_path: that is 0700, so the sandbox user could not even reach the public file,
    and inside the sandbox /tmp is the job's own tmpfs."""
    d = Path(tempfile.mkdtemp(prefix="tempering-secret-", dir="/var/tmp"))
    os.chmod(d, 0o755)
    (d / "secret.txt").write_text(SECRET)
    os.chmod(d / "secret.txt", 0o600)
    (d / "public.txt").write_text("public")
    os.chmod(d / "public.txt", 0o644)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="session")
def sandbox_cfg(secret_dir):
    return SandboxConfig(workers=2, disk_mb=16, ro_paths=(str(secret_dir),))


@pytest.fixture(scope="session")
def sandbox(sandbox_cfg, tmp_path_factory):
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed (apt-get install -y bubblewrap)")
    os.environ["TEMPERING_TEST_SECRET"] = SECRET  # a parent-environment secret jobs must not see
    sb = make_sandbox(sandbox_cfg, log_dir=tmp_path_factory.mktemp("run"))
    yield sb
    sb.close()
