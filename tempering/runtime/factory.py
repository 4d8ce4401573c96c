"""`open_runtime`: the runtime a run's `[runtime]` section names.

"local" is the embedded default (`runtime.local`); "ray" connects to a Ray cluster
(`runtime.ray`), which is imported here only for that kind, so a run that does not ask for Ray
never needs it installed. A private Ray instance ("local") offers what every worker of the run
asks for, so that all of them are placed. It starts no worker itself.
"""

from __future__ import annotations

import os
from tempering.config import RuntimeConfig
from tempering.errors import UserError
from tempering.runtime.interface import Runtime
from tempering.runtime.local import LocalRuntime


def open_runtime(cfg: RuntimeConfig) -> Runtime:
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
    # (`threads_per_process`): it offers every worker the run starts what it asks for (a CPU
    # each, and a cluster's custom resources), so a config written for a cluster runs here too.
    ranks = cfg.trainer_ranks - 1
    offered: dict[str, float] = {}
    replicas = max(cfg.replicas, cfg.max_replicas)  # elastic replicas may grow to the maximum
    for count, asks in ((replicas, cfg.replica_resources), (ranks, cfg.trainer_resources)):
        for name, amount in asks.items():
            offered[name] = offered.get(name, 0.0) + count * amount
    cpus = max(len(os.sched_getaffinity(0)), replicas + ranks)
    return RayRuntime("local", num_cpus=cpus, resources=offered, **deadlines)
