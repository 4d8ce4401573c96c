"""Choosing a sandbox backend from the `[sandbox]` config section, refusing unsafe choices."""

from __future__ import annotations

from tempering.config import SandboxConfig
from tempering.sandbox.request import Sandbox
from tempering.sandbox.unisolated import UnisolatedSandbox


class SandboxUnavailable(RuntimeError):
    """Isolation was asked for but this machine cannot provide it; the message says what is missing."""


def make_sandbox(cfg: SandboxConfig) -> Sandbox:
    if cfg.backend == "unisolated":
        if not cfg.allow_unisolated:
            raise SandboxUnavailable(
                "sandbox.backend = 'unisolated' runs model-written code with no isolation; "
                "set sandbox.allow_unisolated = true to accept that explicitly"
            )
        return UnisolatedSandbox()
    raise SandboxUnavailable(f"sandbox.backend: unknown backend {cfg.backend!r}")
