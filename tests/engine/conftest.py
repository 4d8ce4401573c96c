"""Engine test fixtures; helpers the tests import are in engine_helpers.py."""

from __future__ import annotations

import pytest

from engine_helpers import ARCH
from tempering.models import build_model


@pytest.fixture(scope="module")
def model():
    return build_model(ARCH, seed=0).eval()
