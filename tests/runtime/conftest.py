"""Starting Ray for the runtime tests: where it cannot start here, the tests say why and skip."""

from __future__ import annotations

import signal
from typing import Any, Callable

import pytest


@pytest.fixture(scope="session")
def start_ray() -> Callable[[Callable[[], Any]], Any]:
    """`start_ray(make)`: `make()` (which starts or joins a Ray instance), or a skip naming why
    it could not. Only the errors of a failed start skip; anything else fails the test."""
    pytest.importorskip("ray", reason="Ray is not installed (pip install 'tempering[ray]')")

    def start(make: Callable[[], Any]) -> Any:
        try:
            return make()
        except (RuntimeError, ConnectionError, OSError) as e:
            pytest.skip(f"Ray could not start here: {type(e).__name__}: {e}")

    return start


@pytest.fixture(scope="module", autouse=True)
def _signal_handlers():
    """Each node that ray.cluster_utils starts in this process sets its own SIGTERM handler; the
    tests after these expect the process's own (tests/test_runtime.py checks them)."""
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    yield
    for sig, handler in handlers.items():
        signal.signal(sig, handler)
