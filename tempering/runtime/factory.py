"""`open_runtime`: the runtime a run's `[runtime]` section names.

"local" is the embedded default (`runtime.local`); "ray" connects to a Ray cluster
(`runtime.ray`), which is imported here only for that kind, so a run that does not ask for Ray
never needs it installed. A private Ray instance ("local") is sized so that every worker of the
run is placed. It starts no worker itself.
"""

from __future__ import annotations

import os
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
    deadlines = {"connect_timeout_s": cfg.connect_timeout_s, "call_timeout_s": cfg.call_timeout_s,
                 "start_timeout_s": cfg.start_timeout_s}
    if cfg.address != "local":
        return RayRuntime(cfg.address, **deadlines)
    # A private instance is this machine, whose cores the run's processes already share
    # (`threads_per_process`): it offers a CPU to every worker the run starts (each replica and
    # each trainer rank after the first asks for one), so none waits for a core Ray counts as taken.
    workers = cfg.replicas + cfg.trainer_ranks - 1
    return RayRuntime("local", num_cpus=max(len(os.sched_getaffinity(0)), workers), **deadlines)
