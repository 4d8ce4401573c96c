"""Choosing a sandbox backend from the `[sandbox]` config section, refusing unsafe choices.

The isolated backend ("bwrap", the default) runs the start-up check first and raises
`SandboxUnavailable` naming what is missing; it never falls back silently. The toolchain that
`sandbox.toolchain` names is located here and handed to either backend. The unisolated
backend runs only when `sandbox.allow_unisolated = true` says so explicitly.
"""

from __future__ import annotations

from pathlib import Path

from tempering.config import SandboxConfig
from tempering.sandbox import toolchain
from tempering.sandbox.isolated import IsolatedSandbox
from tempering.sandbox.probe import SandboxUnavailable, probe
from tempering.sandbox.request import Sandbox
from tempering.sandbox.unisolated import UnisolatedSandbox

__all__ = ["SandboxUnavailable", "make_sandbox"]


def make_sandbox(cfg: SandboxConfig, log_dir: str | Path | None = None) -> Sandbox:
    """A started backend; `log_dir` (usually the run directory) receives sandbox.jsonl."""
    try:
        tc = toolchain.locate(cfg.toolchain)
    except toolchain.ToolchainError as e:
        raise SandboxUnavailable(str(e)) from None
    if cfg.backend == "unisolated":
        if not cfg.allow_unisolated:
            raise SandboxUnavailable(
                "sandbox.backend = 'unisolated' runs model-written code with no isolation; "
                "set sandbox.allow_unisolated = true to accept that explicitly"
            )
        return UnisolatedSandbox(cfg, log_dir=log_dir, toolchain=tc)
    if cfg.backend == "bwrap":
        return IsolatedSandbox(cfg, probe(cfg), log_dir=log_dir, toolchain=tc)
    raise SandboxUnavailable(f"sandbox.backend: unknown backend {cfg.backend!r}")
