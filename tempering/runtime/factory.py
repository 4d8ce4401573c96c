"""`open_runtime`: the runtime a run's `[runtime]` section names.

"local" is the embedded default (`runtime.local`); "ray" connects to a Ray cluster
(`runtime.ray`), which is imported here only for that kind, so a run that does not ask for Ray
never needs it installed. It starts no worker itself.
"""

from __future__ import annotations

from typing import Any

from tempering.config import RuntimeConfig
from tempering.errors import UserError
from tempering.runtime.local import LocalRuntime


def open_runtime(cfg: RuntimeConfig) -> Any:
    """A `LocalRuntime`, or a `RayRuntime` connected to `cfg.address`; the caller closes it."""
    if cfg.kind == "local":
        return LocalRuntime()
    try:
        from tempering.runtime.ray import RayRuntime
    except ModuleNotFoundError as e:
        if (e.name or "").split(".")[0] != "ray":
            raise
        raise UserError('runtime.kind = "ray": Ray is not installed (pip install "tempering[ray]")') from None
    return RayRuntime(cfg.address, connect_timeout_s=cfg.connect_timeout_s, call_timeout_s=cfg.call_timeout_s,
                      start_timeout_s=cfg.start_timeout_s)
