"""`BatchAssembler`: scored groups filed into rollout batches, and a batch's telemetry as the sum
of what its workers reported since the previous batch.

A batch opens when its first order is sent; each accepted group joins it with the version it
started at, the tokens it generated on its replica and its node's sandbox waits. Every
`GroupDone` (accepted or set aside) carries what its worker spent since its previous one (the
runner's phases, the graders' calls, weight loads), so the batch's figures are sums of those.
It decides nothing: which groups exist and when a batch is complete are the scheduler's.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field, fields

from tempering.records import Group
from tempering.rollout.worker import GroupDone
from tempering.weights import SyncStats


@dataclass(frozen=True)
class NodeRecord:
    """The sandbox nodes' queue and job waits over a batch (the waits in seconds)."""

    queued: int  # the longest queue a node reported
    jobs: int
    wait_p50: float
    wait_p99: float
    wait: dict[str, float]  # per domain: mean wait


@dataclass
class RolloutBatch:
    index: int
    version: int  # the oldest engine version any of its groups started at
    groups: list[Group]
    generated_tokens: int
    seconds: float  # from its groups' dispatch to its last group's score
    scheduler: dict[str, dict[str, float]]  # per domain: shares, weight, level, pass rate (Mix.metrics)
    node: NodeRecord | None  # the sandbox nodes' queue and waits over the batch (None without a sandbox)
    startup_s: float | None = None  # on the workers' first batch: from spawn to ready to generate
    # the runners' time since the previous batch: engine steps, and thread time (overlapping
    # them) opening workspaces, running tools and scoring
    runner_seconds: dict[str, float] = field(default_factory=dict)
    refilled: int = 0  # groups re-drawn in place of ones whose rewards did not vary (dynamic sampling)
    sync: SyncStats = field(default_factory=SyncStats)  # the workers' weight loads since the previous batch
    sync_total: SyncStats = field(default_factory=SyncStats)  # ... and since they started
    engine_busy_s: float = 0.0  # wall time inside engine steps since the workers started (idle = 1 - busy/wall)
    requeued: int = 0  # its groups re-placed on another replica after theirs was lost
    replicas: dict[str, int] = field(default_factory=dict)  # replica -> its groups in this batch
    elastic: dict[str, float] | None = None  # the elastic policy's decision on this batch (`runtime.elastic`)


@dataclass
class _Open:
    dispatched: float
    groups: list[tuple[int, Group, int]] = field(default_factory=list)  # (order id, group, start version)
    waits: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    queued: list[int] = field(default_factory=list)
    tokens: Counter = field(default_factory=Counter)  # replica -> tokens its groups generated
    by_replica: Counter = field(default_factory=Counter)  # replica -> its groups
    requeued: int = 0


class BatchAssembler:
    def __init__(self) -> None:
        self._open: dict[int, _Open] = {}
        self._seconds: Counter = Counter()  # the runners' phases since the last batch
        self._generate: Counter = Counter()  # replica -> its engine seconds since the last batch
        self._sync = SyncStats()  # weight loads since the last batch
        self._sync_total = SyncStats()
        self._busy_s = 0.0  # engine seconds of every replica since the start
        self._startup: float | None = None

    def opened(self, batch: int) -> None:
        """An order of `batch` was sent (the first opens it)."""
        self._open.setdefault(batch, _Open(time.perf_counter()))

    def requeued(self, batch: int) -> None:
        self._open[batch].requeued += 1

    def reported(self, done: GroupDone) -> None:
        """What a worker spent since its previous group (counted whether or not the group is used)."""
        name = done.order.replica
        self._seconds.update(done.runner_seconds)
        self._generate[name] += done.runner_seconds.get("generate", 0.0)
        self._busy_s += done.runner_seconds.get("generate", 0.0)
        self._sync, self._sync_total = _plus(self._sync, done.sync), _plus(self._sync_total, done.sync)
        if done.startup_s is not None:
            self._startup = max(self._startup or 0.0, done.startup_s)

    def add(self, done: GroupDone) -> None:
        """A group into its batch."""
        name = done.order.replica
        batch = self._open[done.order.batch]
        batch.groups.append((done.order.id, done.group, done.version))
        batch.tokens[name] += sum(t.num_model_tokens for t in done.group.trajectories)
        batch.by_replica[name] += 1
        if done.node is not None:
            for domain, waits in done.node.waits.items():
                batch.waits[domain] += waits
            batch.queued.append(done.node.queued)

    def has(self, batch: int) -> bool:
        return batch in self._open

    def assemble(self, b: int, scheduler: dict[str, dict[str, float]], refilled: int) -> RolloutBatch:
        """Batch `b` as filed, with the telemetry since the previous batch (which restarts)."""
        batch = self._open.pop(b)
        batch.groups.sort(key=lambda x: x[0])
        groups = [g for _, g, _ in batch.groups]
        out = RolloutBatch(b, min(v for _, _, v in batch.groups), groups,
                           sum(t.num_model_tokens for g in groups for t in g.trajectories),
                           time.perf_counter() - batch.dispatched, scheduler,
                           _node_record(batch) if batch.queued else None, self._startup, dict(self._seconds),
                           refilled, sync=self._sync, sync_total=self._sync_total, engine_busy_s=self._busy_s,
                           requeued=batch.requeued, replicas=dict(sorted(batch.by_replica.items())))
        # the phases seen stay, at 0: a batch whose groups all came before the previous one was taken still has them
        self._seconds = Counter(dict.fromkeys(self._seconds, 0.0))
        self._generate, self._sync, self._startup = Counter(), SyncStats(), None
        return out

    def throughputs(self, b: int) -> dict[str, float]:
        """Each replica's tokens per second of generation since the previous batch, its tokens
        being those of its groups in batch `b` (asked before `assemble`)."""
        tokens = self._open[b].tokens
        return {name: tokens[name] / s for name, s in self._generate.items() if s > 0}


def _plus(a: SyncStats, b: SyncStats) -> SyncStats:
    return SyncStats(*(getattr(a, f.name) + getattr(b, f.name) for f in fields(SyncStats)))


def _node_record(batch: _Open) -> NodeRecord:
    waits = sorted(w for ws in batch.waits.values() for w in ws)
    pick = (lambda q: waits[min(len(waits) - 1, int(q * len(waits)))]) if waits else (lambda q: 0.0)
    return NodeRecord(max(batch.queued), len(waits), pick(0.5), pick(0.99),
                      {d: sum(ws) / len(ws) for d, ws in batch.waits.items() if ws})
