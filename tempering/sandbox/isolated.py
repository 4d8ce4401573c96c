"""The isolated backend (`sandbox.backend = "bwrap"`, the default): jobs in bubblewrap sandboxes.

It wires the pieces together: the staging directory and bwrap command line (`bwrap`), the
sandbox's cgroup subtree (`cgroups`), the warm pools of zygotes (`pool`, `zygote`), the host
side of each execution (`job`), the per-execution log (`telemetry`) and the watcher that
cleans up if this process dies (`reaper`). Two pools: one-shot jobs run on inits confined
before their job arrives (as before sessions existed); jobs with mounts
(session commands, verification) on a second pool, started on first use, whose inits mount
the job's filesystems first and then confine themselves, and whose sandboxes see the
toolchain. `run` is safe to call from many threads at once and returns an ExecResult whatever
the job or the sandbox does; it raises ValueError only for a request whose files do not fit
the configured memory limit (`ExecRequest.resolved`). Build it with `make_sandbox`, which runs
the start-up check first.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from pathlib import Path

from tempering.config import SandboxConfig
from tempering.records import ExecReason, ExecResult
from tempering.sandbox import bwrap, cgroups, job, layers
from tempering.sandbox.pool import WarmPool
from tempering.sandbox.probe import Capabilities, SandboxUnavailable
from tempering.sandbox.reaper import Reaper
from tempering.sandbox.request import LAYER_MOUNT, Abort, ExecRequest, Sandbox
from tempering.sandbox.session import Session, SessionDefaults, SessionSpec
from tempering.sandbox.telemetry import ExecLog
from tempering.sandbox.toolchain import Toolchain
from tempering.sandbox.workspace import Workspace
from tempering.sandbox.zygote import Zygote, ZygoteError

_START_TIMEOUT_S = 30.0  # bwrap plus an interpreter; slow only on an overloaded machine


class IsolatedSandbox:
    name = "bwrap"

    def __init__(self, cfg: SandboxConfig, caps: Capabilities, log_dir: str | Path | None = None,
                 toolchain: Toolchain | None = None) -> None:
        self._cfg, self._run_as, self._toolchain = cfg, caps.run_as, toolchain
        self._home = toolchain.home() if toolchain else Workspace()  # HOME's start in every session
        self._settings = job.Settings(cpus=cfg.cpus, disk_mb=cfg.disk_mb,
                                      collect_limit_bytes=cfg.collect_limit_bytes)
        self._staging = bwrap.Staging.create()
        argv = dict(bwrap=caps.bwrap, staging=self._staging, guest_python=cfg.guest_python,
                    ro_paths=tuple(cfg.ro_paths), disk_mb=cfg.disk_mb, disable_userns=caps.bwrap_version >= (0, 8, 0))
        self._argv = bwrap.command(**argv)
        self._layers = layers.folder() if toolchain else None  # layers add to a toolchain's packages
        self._late_argv = bwrap.command(**argv, late=True, toolchain=str(toolchain.root) if toolchain else None,
                                        layers=str(self._layers) if self._layers else None)
        self._tree: cgroups.Tree | None = None
        self._pool: WarmPool | None = None
        self._late_pool: WarmPool | None = None  # for jobs with mounts; started on first use
        self._late_lock = threading.Lock()
        self._reaper: Reaper | None = None
        self._log = ExecLog(log_dir) if log_dir is not None else None
        try:
            self._tree = cgroups.Tree.create(caps.cgroups, workers=cfg.workers)
            self._reaper = Reaper.start(self._tree.dirs, str(self._staging.root))
            self._pool = WarmPool(cfg.workers if cfg.warm_pool else 0, lambda: self._start_zygote(self._argv),
                                  self._prepare)
            self._pool.fill()
        except (cgroups.CgroupError, ZygoteError, OSError) as e:
            self.close()
            raise SandboxUnavailable(f"the isolated sandbox failed to start: {e}") from None

    def _start_zygote(self, argv: list[str]) -> Zygote:
        z = Zygote.spawn(argv, self._run_as)
        z.wait_ready(_START_TIMEOUT_S)
        try:
            self._tree.adopt(z.pid)
        except OSError as e:
            z.close()
            raise ZygoteError(f"cannot move the zygote into its cgroup: {e}") from None
        return z

    def _prepare(self, z: Zygote) -> None:
        z.prepare(self._tree, _START_TIMEOUT_S)

    def _pool_for(self, request: ExecRequest) -> WarmPool:
        if not request.mounts and not request.layer:
            return self._pool
        with self._late_lock:
            if self._late_pool is None:  # warms up as it is used: each cold start joins it
                self._late_pool = WarmPool(self._cfg.workers if self._cfg.warm_pool else 0,
                                           lambda: self._start_zygote(self._late_argv), self._prepare)
            return self._late_pool

    def run(self, request: ExecRequest, abort: Abort | None = None) -> ExecResult:
        t0 = time.monotonic()
        request = request.resolved(self._cfg)  # unset limits: the config's (and the log says which applied)
        extra: dict = {}
        pool = self._pool_for(request)
        try:
            zygote, warm = pool.acquire()
        except ZygoteError as e:
            result = ExecResult(reason=ExecReason.SANDBOX_ERROR, exit_code=None, error=str(e))
        else:
            outcome = job.execute(zygote.take(), request, self._settings,
                                  dispatched=lambda: pool.dispatched(zygote), abort=abort)
            pool.release(zygote, outcome.healthy)
            result = dataclasses.replace(outcome.result, start="warm" if warm else "cold")
            extra = {"setup_s": round(outcome.setup_s, 6), "skipped": outcome.skipped,
                     "zygote_replaced": not outcome.healthy}
        if self._log is not None:
            self._log.write(self.name, request, result, total_s=round(time.monotonic() - t0, 6), **extra)
        return result

    @property
    def toolchain(self) -> Toolchain | None:
        """The toolchain its sessions see (None: none)."""
        return self._toolchain

    def open_session(self, spec: SessionSpec, runner: Sandbox | None = None) -> Session:
        cfg, tc = self._cfg, self._toolchain
        if spec.layer and self._layers is None:
            raise ValueError(f"SessionSpec.layer {spec.layer[:12]}...: this sandbox has no toolchain, so no package "
                             "layers either (build it with scripts/setup.sh)")
        env = tc.session_env(bwrap.TOOLCHAIN_MOUNT, LAYER_MOUNT if spec.layer else None) if tc else {}
        return Session(runner or self, spec, SessionDefaults.from_config(cfg, env=env, home=self._home))

    def close(self) -> None:
        """End every sandbox and remove the cgroups; call after the last run() has returned."""
        for pool in (self._pool, self._late_pool):
            if pool is not None:
                pool.close()
        if self._tree is not None:
            self._tree.close()
        self._staging.remove()
        if self._log is not None:
            self._log.close()
        if self._reaper is not None:
            self._reaper.stop()
            self._reaper = None

    def __enter__(self) -> "IsolatedSandbox":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
