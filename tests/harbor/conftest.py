"""One isolated sandbox for the Harbor tests (started once; sessions warm its second pool)."""

from __future__ import annotations

import shutil

import pytest

from tempering.config import SandboxConfig
from tempering.sandbox import make_sandbox


@pytest.fixture(scope="session")
def sandbox(tmp_path_factory):
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed (apt-get install -y bubblewrap)")
    sb = make_sandbox(SandboxConfig(workers=2), log_dir=tmp_path_factory.mktemp("run"))
    yield sb
    sb.close()
