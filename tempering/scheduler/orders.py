"""The records the global scheduler hands out and takes back: `GroupOrder` (one group to run,
on a replica), `GroupReport` (what a finished group used and scored) and `NodePolicy` (what a
node's local scheduler is handed). Plain frozen values; no part of the scheduler lives here."""

from __future__ import annotations

from dataclasses import dataclass

from tempering.pool import TaskDraw


@dataclass(frozen=True)
class GroupOrder:
    """One group to run: samples of `task` (made where it runs), for rollout batch `batch`, on
    `replica`."""

    id: int
    batch: int
    task: TaskDraw
    replica: str
    priority: int
    level: int
    version: int = 0  # the newest version published when it was admitted (the least it may start at)


@dataclass(frozen=True)
class GroupReport:
    """What a finished group used and scored (failed samples left out of the scores)."""

    order: int
    tokens: int
    sandbox_s: float
    outcomes: tuple[float, ...]
    rewards: tuple[float, ...]


@dataclass(frozen=True)
class NodePolicy:
    """What a node's local scheduler is handed: each sandbox domain's share of its slots, and
    the domains' priorities."""

    quotas: dict[str, float]
    priorities: dict[str, int]
