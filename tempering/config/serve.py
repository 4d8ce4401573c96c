"""`tempering serve`'s config: `[serve]` (the order of engine requests, agent runs, recording,
following a training run) and its tenants (`[serve.tenants.<name>]`: priority, share, rate
limit). API keys are not config (they are secrets, and config is written out): the keys file
and `--api-key` map them to tenant names (`tempering.serve.tenants`)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

from tempering.config.checks import _require, _require_choices

TENANT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


@dataclass(frozen=True)
class TenantConfig:
    """[serve.tenants.<name>]. A tenant named by a key but not here gets these defaults."""

    # higher goes first: the fair queue serves a higher level's requests before a lower one's,
    # and the node's sandbox scheduler moves its jobs up by serve.aging_s per level
    priority: int = 0
    share: float = 1.0  # its weight among the tenants of its priority (engine tokens, sandbox slots)
    requests_per_s: float = 0.0  # sustained rate of requests and agent runs; 0 = unlimited
    burst: int = 0  # requests it may send at once above the rate; 0 = max(1, requests_per_s)

    def check(self, key: str) -> None:
        """Its bounds; `key` (serve.tenants.<name>) names it in the error."""
        _require(type(self.priority) is int, f"{key}.priority", "an integer", self.priority)
        _require(0 < self.share <= 1e6, f"{key}.share", "a number in (0, 1e6]", self.share)
        _require(self.requests_per_s >= 0, f"{key}.requests_per_s", "a number >= 0 (0 = unlimited)",
                 self.requests_per_s)
        _require(self.burst >= 0, f"{key}.burst", "an integer >= 0 (0 = the rate, at least 1)", self.burst)


@dataclass(frozen=True)
class ServeConfig:
    # the order in which waiting requests reach the engine: "fair" (by tenant priority, then
    # share of generated tokens: a flooding tenant waits behind its own requests) or "fifo"
    queue: Literal["fair", "fifo"] = "fair"
    max_running: int = 0  # sequences in the engine at once; 0 = engine.max_batch_size
    max_queued: int = 4096  # requests waiting for the engine; past it a request gets 503
    # how served tool calls are written (as rollout.tool_parser): "auto" = hermes with a chat template
    tool_parser: Literal["auto", "hermes", "compact"] = "auto"
    max_agent_runs: int = 16  # agent runs at once; past it a run gets 503
    # folders under which a client may name a Harbor task folder for an agent run (besides the
    # shipped terminal tasks, named by name); () = none
    task_dirs: tuple[str, ...] = ()
    # a directory that records served requests and agent runs (lineage.sqlite, sandbox.jsonl),
    # which `tempering view` shows; "" = none
    log_dir: str = ""
    follow_poll_s: float = 2.0  # --follow: how often the run's checkpoints are looked at
    aging_s: float = 30.0  # sandbox jobs: this much waiting is worth one priority level
    tenants: dict[str, TenantConfig] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _require_choices(self, "serve")
        _require(self.max_running >= 0, "serve.max_running", "an integer >= 0 (0 = engine.max_batch_size)",
                 self.max_running)
        _require(self.max_queued > 0, "serve.max_queued", "an integer > 0", self.max_queued)
        _require(self.max_agent_runs > 0, "serve.max_agent_runs", "an integer > 0", self.max_agent_runs)
        _require(self.follow_poll_s > 0, "serve.follow_poll_s", "a number > 0", self.follow_poll_s)
        _require(self.aging_s > 0, "serve.aging_s", "a number > 0", self.aging_s)
        for d in self.task_dirs:
            _require(d.startswith("/"), "serve.task_dirs", "absolute paths", d)
        for name, tenant in self.tenants.items():
            _require(TENANT_NAME.fullmatch(name) is not None, f"serve.tenants.{name}",
                     "a name of letters, digits, '.', '_' or '-'", name)
            tenant.check(f"serve.tenants.{name}")
