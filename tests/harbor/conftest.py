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


@pytest.fixture
def local_index(tmp_path_factory, monkeypatch):
    """pip offline, with only tempering-tiny 1.0 and 2.0 to find (a folder of wheels): package
    layers build from it, and anything else cannot be built, as when PyPI is out of reach. The
    test layers are removed first, so each test builds its own."""
    from harbor_helpers import make_wheel

    from tempering import cache

    wheels = tmp_path_factory.mktemp("wheels")
    for version in ("1.0", "2.0"):
        make_wheel(wheels, version)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(wheels))
    for layer in (cache.root() / "layers").glob("*/manifest.json"):
        if "tempering-tiny" in layer.read_text():
            shutil.rmtree(layer.parent)
    return wheels
