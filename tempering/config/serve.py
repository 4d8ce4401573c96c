"""`tempering serve`'s config: `[serve]` (the HTTP server's limits, the order of engine requests,
agent runs, recording, following a training run) and its tenants (`[serve.tenants.<name>]`: priority, share, rate
limit). API keys are not config (they are secrets, and config is written out): the keys file
and `--api-key` map them to tenant names (`tempering.serve.tenants`)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Annotated, Literal

from tempering.config.checks import Each, Match, Range, check_fields

TENANT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
TenantName = Annotated[str, Match(TENANT_NAME.pattern, "a name of letters, digits, '.', '_' or '-'")]


@dataclass(frozen=True)
class TenantConfig:
    """[serve.tenants.<name>]. A tenant named by a key but not here gets these defaults."""

    # higher goes first: the fair queue serves a higher level's requests before a lower one's,
    # and the node's sandbox scheduler moves its jobs up by serve.aging_s per level
    priority: int = 0
    share: Annotated[float, Range(gt=0, le=1_000_000)] = 1.0  # its weight among the tenants of its priority (engine tokens, sandbox slots)
    requests_per_s: Annotated[float, Range(ge=0, note="0 = unlimited")] = 0.0  # sustained rate of requests and agent runs; 0 = unlimited
    burst: Annotated[int, Range(ge=0)] = 0  # requests it may send at once above the rate; 0 = max(1, requests_per_s)

    def check(self, key: str) -> None:
        """Its bounds; `key` (serve.tenants.<name>) names it in the error."""
        check_fields(self, key)


@dataclass(frozen=True)
class ServeConfig:
    # the order in which waiting requests reach the engine: "fair" (by tenant priority, then
    # share of generated tokens: a flooding tenant waits behind its own requests) or "fifo"
    queue: Literal["fair", "fifo"] = "fair"
    max_running: Annotated[int, Range(ge=0)] = 0  # sequences in the engine at once; 0 = engine.max_batch_size
    max_queued: Annotated[int, Range(gt=0)] = 4096  # requests waiting for the engine; past it a request gets 503
    # how served tool calls are written (as rollout.tool_parser): "auto" = hermes with a chat template
    tool_parser: Literal["auto", "hermes", "compact"] = "auto"
    max_agent_runs: Annotated[int, Range(gt=0)] = 16  # agent runs at once; past it a run gets 503
    # folders under which a client may name a Harbor task folder for an agent run (besides the
    # shipped terminal tasks, named by name); () = none
    task_dirs: Annotated[tuple[str, ...], Each(Match("/.*", "absolute paths"))] = ()
    # a directory that records served requests and agent runs (lineage.sqlite, sandbox.jsonl),
    # which `tempering view` shows; "" = none
    log_dir: str = ""
    follow_poll_s: Annotated[float, Range(gt=0)] = 2.0  # --follow: how often the run's checkpoints are looked at
    aging_s: Annotated[float, Range(gt=0)] = 30.0  # sandbox jobs: this much waiting is worth one priority level
    tenants: dict[TenantName, TenantConfig] = field(default_factory=dict)
    request_timeout_s: Annotated[float, Range(gt=0)] = 600.0  # the server's deadline for one request
    max_request_sequences: Annotated[int, Range(gt=0)] = 256  # the server refuses requests asking for more (prompts x n)

    def __post_init__(self) -> None:
        check_fields(self, "serve")
        for name, tenant in self.tenants.items():
            tenant.check(f"serve.tenants.{name}")
