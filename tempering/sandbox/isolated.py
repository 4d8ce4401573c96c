"""The isolated backend (`sandbox.backend = "bwrap"`, the default): jobs in bubblewrap sandboxes.

It wires the pieces together: the staging directory and bwrap command line (`bwrap`), the
sandbox's cgroup subtree (`cgroups`), the warm pool of zygotes (`pool`, `zygote`), the host
side of each execution (`job`) and the per-execution log (`telemetry`). `run` is safe to call
from many threads at once and always returns an ExecResult. Build it with
`make_sandbox`, which runs the start-up check first.
"""

from __future__ import annotations

import dataclasses
import itertools
import time
from pathlib import Path

from tempering.config import SandboxConfig
from tempering.records import ExecReason, ExecResult
from tempering.sandbox import bwrap, cgroups, job
from tempering.sandbox.pool import WarmPool
from tempering.sandbox.probe import Capabilities, SandboxUnavailable
from tempering.sandbox.request import ExecRequest
from tempering.sandbox.telemetry import ExecLog
from tempering.sandbox.zygote import Zygote, ZygoteError

_START_TIMEOUT_S = 30.0  # bwrap plus an interpreter; slow only on an overloaded machine


class IsolatedSandbox:
    name = "bwrap"

    def __init__(self, cfg: SandboxConfig, caps: Capabilities, log_dir: str | Path | None = None) -> None:
        self._run_as = caps.run_as
        self._ids = itertools.count()
        self._settings = job.Settings(cpus=cfg.cpus, disk_mb=cfg.disk_mb,
                                      collect_limit_bytes=cfg.collect_limit_bytes,
                                      python_fast_path=cfg.python_fast_path)
        self._staging = bwrap.Staging.create()
        self._argv = bwrap.command(caps.bwrap, self._staging, cfg.guest_python, tuple(cfg.ro_paths),
                                   cfg.disk_mb, disable_userns=caps.bwrap_version >= (0, 8, 0))
        self._tree: cgroups.Tree | None = None
        self._pool: WarmPool | None = None
        self._log = ExecLog(log_dir) if log_dir is not None else None
        try:
            self._tree = cgroups.Tree.create(caps.cgroups, workers=cfg.workers)
            self._pool = WarmPool(cfg.workers if cfg.warm_pool else 0, self._start_zygote, self._prepare)
            self._pool.fill()
        except (cgroups.CgroupError, ZygoteError) as e:
            self.close()
            raise SandboxUnavailable(f"the isolated sandbox failed to start: {e}") from None

    def _start_zygote(self) -> Zygote:
        z = Zygote.spawn(self._argv, self._run_as)
        z.wait_ready(_START_TIMEOUT_S)
        try:
            self._tree.adopt(z.pid)
        except OSError as e:
            z.close()
            raise ZygoteError(f"cannot move the zygote into its cgroup: {e}") from None
        return z

    def _prepare(self, z: Zygote) -> None:
        z.prepare(self._tree, _START_TIMEOUT_S)

    def run(self, request: ExecRequest) -> ExecResult:
        job_id = next(self._ids)
        t0 = time.monotonic()
        extra: dict = {}
        try:
            zygote, warm = self._pool.acquire()
        except ZygoteError as e:
            result = ExecResult(reason=ExecReason.SANDBOX_ERROR, exit_code=None, error=str(e))
        else:
            outcome = job.execute(zygote.take(), request, self._settings,
                                  dispatched=lambda: self._pool.dispatched(zygote))
            self._pool.release(zygote, outcome.healthy)
            result = dataclasses.replace(outcome.result, start="warm" if warm else "cold")
            extra = {"setup_s": round(outcome.setup_s, 6), "skipped": outcome.skipped,
                     "zygote_replaced": not outcome.healthy, "in_process": outcome.in_process}
        if self._log is not None:
            self._log.write(job_id, self.name, request, result, total_s=round(time.monotonic() - t0, 6), **extra)
        return result

    def close(self) -> None:
        """End every sandbox and remove the cgroups; call after the last run() has returned."""
        if self._pool is not None:
            self._pool.close()
        if self._tree is not None:
            self._tree.close()
        self._staging.remove()
        if self._log is not None:
            self._log.close()

    def __enter__(self) -> "IsolatedSandbox":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
