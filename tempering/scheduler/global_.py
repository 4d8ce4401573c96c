"""`GlobalScheduler`: which groups start, in which domain, at which level, and where.

It owns the task pool. Admission keeps the staleness bound (batch b starts once version
b - max_staleness is published) and applies backpressure (no new batch while `queue_size`
complete batches wait for the trainer). Each group of an admitted batch goes to the domain
with the lowest weighted dominant share: a domain's usage of each resource (generated tokens,
as seconds of the engine replicas' throughput; sandbox seconds, as seconds of all the nodes'
slots; groups, as seconds of the rate at which the trainer takes them, since every group takes
a place in a batch however little it cost to generate) is charged with the domain's expected cost when the
group starts and corrected by what it used when it ends, decays over `horizon` groups, and the
largest of the three, divided by the domain's weight, is what fairness equalises (dominant
resource fairness). So `tasks.weights` are shares of the resources, and a domain whose groups
are expensive gets fewer of them. Weights
adapt and domains move up difficulty levels as `Curriculum` says. A group goes to the replica
with the least expected work in flight per unit of throughput; replicas and sandbox nodes may
join and leave while running (the groups of a replica that leaves are handed to the others). Each
node is handed the sandbox domains' slot quotas and priorities (`node_policy`); priorities
also order a batch's groups (higher first). It runs no group itself and knows nothing of how a
node orders its jobs (`scheduler.local`).
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
import math
from collections import Counter
from dataclasses import dataclass
from typing import Any, Mapping

from tempering.config import ConfigError, SchedulerConfig, TasksConfig
from tempering.pool import TaskDraw, TaskPool
from tempering.scheduler.curriculum import Curriculum
from tempering.tasks.registry import matching

_RENORM = 1e100


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


def resolve_priorities(priorities: Mapping[str, int], mix: Mapping[str, Any]) -> dict[str, int]:
    """{domain: priority} over the mix's domains; a key naming none of them is an error. A
    domain's own key wins over a family or glob that matches it, else the first such key."""
    exact = {k: p for k, p in priorities.items() if k in mix}
    out: dict[str, int] = {}
    for key, p in priorities.items():
        if key not in exact:
            for name in matching(key, mix, "scheduler.priorities"):
                out.setdefault(name, p)
    out.update(exact)
    return {name: out.get(name, 0) for name in mix}


class GlobalScheduler:
    def __init__(self, tasks: TasksConfig, cfg: SchedulerConfig, groups_per_batch: int, max_staleness: int,
                 queue_size: int, first_batch: int = 0, last_batch: int | None = None,
                 tokens_per_group: float = 64.0, pool: TaskPool | None = None,
                 group_rate: float = 50.0, refills: int = 0):
        self.cfg = cfg
        self.pool = pool if pool is not None else TaskPool(tasks, seed_offset=first_batch)
        names = list(self.pool.weights)
        self.horizon = cfg.horizon or max(2000, 100 * len(names))
        self._policy: NodePolicy | None = None  # cached until weights or nodes change
        self.priorities = resolve_priorities(cfg.priorities, self.pool.domains)
        self.curriculum = Curriculum(cfg, self.pool.weights, self.pool.levels)
        self.groups_per_batch, self.max_staleness, self.queue_size = groups_per_batch, max_staleness, queue_size
        self.next_batch, self.last_batch = first_batch, last_batch
        self.sandboxed = {n for n in names if self.pool.domains[n].sandbox}
        self.replicas: dict[str, float] = {}  # name -> tokens per second it generates
        self.group_rate = group_rate  # groups per second the trainer takes (its batches' places)
        self.nodes: dict[str, int] = {}  # name -> sandbox slots
        self.inflight: dict[int, GroupOrder] = {}
        self._load: Counter = Counter()  # replica -> expected tokens in flight
        self._homeless: list[GroupOrder] = []  # orders whose replica left while none remained
        self._done: Counter = Counter()  # batch -> groups finished
        self._ready: set[int] = set()  # complete batches the trainer has not taken
        # DAPO's dynamic sampling: a group whose rewards do not vary teaches nothing, so up to
        # `refills` groups per batch are re-drawn; the batch completes when all its orders end.
        self.refills = refills
        self._refilled: Counter = Counter()  # batch -> replacement groups ordered
        self._replacements: list[GroupOrder] = []  # ordered by `complete`, handed out by `admit`
        self._ids = itertools.count()
        self._charged: dict[int, tuple[float, float]] = {}  # order -> (tokens, sandbox s) charged at its start
        # expected cost of one group, learned per domain: generated tokens, sandbox seconds
        self.cost = {n: [tokens_per_group, 1.0 if n in self.sandboxed else 0.0] for n in names}
        # tokens, sandbox seconds, groups: decayed, in growing units (see _growth)
        self.usage = {n: [0.0, 0.0, 0.0] for n in names}
        self._learned: set[str] = set()  # domains whose cost comes from a finished group
        self._flying: Counter = Counter()  # domain -> its groups ordered and not yet finished
        self._orders_made = 0
        self._offset = 0  # orders made at the last renormalisation (growth is 1 there)
        self._heap: list = []
        self._stamp = Counter()
        self._rebuild()

    # -- capacity ---------------------------------------------------------------------------------------
    def add_replica(self, name: str, tokens_per_s: float = 1000.0) -> list[GroupOrder]:
        """An engine replica joins. -> orders left without a replica earlier, now given to it."""
        if tokens_per_s <= 0:
            raise ValueError(f"replica {name}: throughput must be > 0, got {tokens_per_s!r}")
        self.replicas[name] = tokens_per_s
        self._rebuild()
        homeless, self._homeless = self._homeless, []
        return [self._place(o) for o in homeless]

    def measured(self, name: str, tokens_per_s: float) -> None:
        """A replica's measured throughput (tokens per second of generation), averaged into
        what the token resource is normalised by."""
        if tokens_per_s > 0 and name in self.replicas:
            self.replicas[name] = 0.8 * self.replicas[name] + 0.2 * tokens_per_s
            self._rebuild()

    def measured_group_rate(self, groups_per_s: float) -> None:
        """The groups per second the trainer took (a batch's groups over the wall time since the
        previous batch), averaged into what the groups resource is normalised by."""
        if groups_per_s > 0:
            self.group_rate = 0.8 * self.group_rate + 0.2 * groups_per_s
            self._rebuild()

    def remove_replica(self, name: str) -> list[GroupOrder]:
        """A replica left; its groups in flight are lost there. -> them, re-ordered on the others
        (none if no replica is left: they wait for the next one to join)."""
        del self.replicas[name]
        self._load.pop(name, None)
        lost = [o for o in self.inflight.values() if o.replica == name]
        if self.replicas:
            self._rebuild()
            return [self._place(o) for o in lost]
        self._homeless += lost
        for o in lost:
            del self.inflight[o.id]
        return []

    def add_node(self, name: str, slots: int) -> None:
        if slots < 1:
            raise ValueError(f"sandbox node {name}: slots must be >= 1, got {slots!r}")
        self.nodes[name] = slots
        self._rebuild()

    def remove_node(self, name: str) -> None:
        del self.nodes[name]
        self._rebuild()

    def node_policy(self) -> NodePolicy:
        """The sandbox domains' shares of every node's slots (their weights among themselves)."""
        if self._policy is None:
            self._policy = self._node_policy()
        return self._policy

    def _node_policy(self) -> NodePolicy:
        weights = self.curriculum.weights()
        total = sum(weights[n] for n in self.sandboxed)
        return NodePolicy({n: weights[n] / total for n in sorted(self.sandboxed)} if total else {},
                          {n: p for n, p in self.priorities.items() if p})

    # -- admission ----------------------------------------------------------------------------------------
    def admit(self, version: int) -> list[GroupOrder]:
        """The groups of every batch the staleness bound and the buffer admit at `version`
        (none without a replica), after the groups re-drawn since the last call."""
        out, self._replacements = self._replacements, []
        while (self.replicas and (self.last_batch is None or self.next_batch < self.last_batch)
               and self.next_batch <= version + self.max_staleness and len(self._ready) < self.queue_size):
            batch = [self.order(self.next_batch, version) for _ in range(self.groups_per_batch)]
            out += sorted(batch, key=lambda o: -o.priority)  # stable: picks keep their order otherwise
            self.next_batch += 1
        return out

    def order(self, batch: int, version: int = 0) -> GroupOrder:
        """One group: the domain fairness picks, a task at its level, the least-loaded replica."""
        name = self.pick()
        level = self.curriculum.level(name)
        task = self.pool.next_draw(name, level if self.pool.domains[name].levels > 1 else None)
        tokens, sandbox_s = self.cost[name]
        self._charge(name, tokens, sandbox_s, 1.0)
        self._flying[name] += 1
        self._orders_made += 1
        order = GroupOrder(next(self._ids), batch, task, "", self.priorities[name], level, version)
        self._charged[order.id] = (tokens, sandbox_s)
        return self._place(order)

    def pick(self) -> str:
        """The domain with the lowest dominant share per unit of weight, passing over domains
        whose first group is still running: until it ends their cost is a guess, and a terminal
        task's minute charged as a second would let them take far more than their share. If every
        domain is waiting for its first group, the lowest goes anyway."""
        passed: list = []
        try:
            while self._heap:
                _, _, stamp, name = self._heap[0]
                if self._stamp[name] != stamp:
                    heapq.heappop(self._heap)
                elif name in self._learned or not self._flying[name]:
                    return name
                else:
                    passed.append(heapq.heappop(self._heap))
            return passed[0][3]
        finally:
            for entry in passed:
                heapq.heappush(self._heap, entry)

    def complete(self, report: GroupReport) -> GroupOrder:
        """A group ended: correct its domain's usage, learn its costs, feed the curriculum."""
        order = self.inflight.pop(report.order)
        name = order.task.domain
        self._flying[name] -= 1
        # take back what its start charged (the cost estimate may have moved since), charge what it used
        tokens, sandbox_s = self._charged.pop(order.id)
        self._load[order.replica] -= tokens
        self._charge(name, report.tokens - tokens, report.sandbox_s - sandbox_s)
        cost = self.cost[name]
        if name in self._learned:
            self.cost[name] = [0.8 * cost[0] + 0.2 * report.tokens, 0.8 * cost[1] + 0.2 * report.sandbox_s]
        else:  # the first group replaces the prior: a terminal task's minute should not look like a second
            self.cost[name] = [float(report.tokens), float(report.sandbox_s)]
            self._learned.add(name)
        self.curriculum.record(name, report.outcomes, report.rewards)
        if self.cfg.adaptive:
            self._policy = None  # the weights, so the quotas, may have moved
        self._push(name)
        if self._refilled[order.batch] < self.refills and not _has_signal(report.rewards):
            self._refilled[order.batch] += 1  # this group's place goes to a new one
            replacement = self.order(order.batch, order.version)
            if replacement.replica:  # otherwise it waits with the homeless for a replica to join
                self._replacements.append(replacement)
            return order
        self._done[order.batch] += 1
        if self._done[order.batch] == self.groups_per_batch:
            self._ready.add(order.batch)
        return order

    def is_complete(self, batch: int) -> bool:
        """Every place of `batch` holds a finished group (and the trainer has not taken it)."""
        return batch in self._ready

    def refilled(self, batch: int) -> int:
        """Groups of `batch` that were re-drawn because their rewards did not vary."""
        return self._refilled[batch]

    def consumed(self, batch: int) -> None:
        """The trainer took `batch`: it no longer holds back admission."""
        self._ready.discard(batch)
        self._done.pop(batch, None)
        self._refilled.pop(batch, None)

    # -- reports ----------------------------------------------------------------------------------------
    def shares(self) -> tuple[dict[str, float], dict[str, float]]:
        """(target, achieved) share of each domain: its weight's share, and its dominant usage's."""
        weights = self.curriculum.weights()
        dominant = {n: self._dominant(n) for n in weights}
        wsum, usum = sum(weights.values()), sum(dominant.values())
        return ({n: w / wsum for n, w in weights.items()},
                {n: (u / usum if usum else 0.0) for n, u in dominant.items()})

    def metrics(self) -> dict[str, dict[str, float]]:
        """Per domain: target and achieved share, weight, level, windowed pass rate and signal."""
        target, achieved = self.shares()
        c = self.curriculum
        return {"share_target": target, "share": achieved, "weight": c.weights(),
                "level": {n: float(c.level(n)) for n in target},
                "pass_rate": {n: p for n in target if (p := c.pass_rate(n)) is not None},
                "signal": {n: s for n in target if (s := c.signal(n)) is not None}}

    def state_dict(self) -> dict[str, Any]:
        g = self._growth()
        return {"curriculum": self.curriculum.state_dict(), "cost": self.cost, "learned": sorted(self._learned),
                "usage": {n: [x / g for x in u] for n, u in self.usage.items()}}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.curriculum.load_state_dict(state["curriculum"])
        g = self._growth()
        for name in self.usage:
            if name in state["usage"]:
                self.usage[name] = [x * g for x in state["usage"][name]]
                self.cost[name] = list(state["cost"][name])
        self._learned = set(state["learned"]) & set(self.usage)
        self._rebuild()

    # -- internals -----------------------------------------------------------------------------------------
    def _place(self, order: GroupOrder) -> GroupOrder:
        if not self.replicas:
            self._homeless.append(order)
            return order
        replica = min(self.replicas, key=lambda r: (self._load[r] / self.replicas[r], r))
        self._load[replica] += self._charged[order.id][0]
        placed = dataclasses.replace(order, replica=replica)
        self.inflight[order.id] = placed
        return placed

    def _growth(self) -> float:
        return math.exp((self._orders_made - self._offset) / self.horizon)

    def _charge(self, name: str, tokens: float, sandbox_s: float, groups: float = 0.0) -> None:
        g = self._growth()
        if g > _RENORM:
            self._offset = self._orders_made
            for u in self.usage.values():
                u[:] = [x / g for x in u]
            g = 1.0
            self._rebuild()
        u = self.usage[name]
        u[0] = max(0.0, u[0] + tokens * g)
        u[1] = max(0.0, u[1] + sandbox_s * g)
        u[2] += groups * g
        self._push(name)

    def _dominant(self, name: str) -> float:
        tokens_per_s = sum(self.replicas.values()) or 1.0
        slots = sum(self.nodes.values()) or 1
        u = self.usage[name]
        return max(u[0] / tokens_per_s, u[1] / slots, u[2] / self.group_rate)

    def _push(self, name: str) -> None:
        self._stamp[name] += 1
        key = self._dominant(name) / self.curriculum.weight(name)
        heapq.heappush(self._heap, (key, -self.priorities[name], self._stamp[name], name))

    def _rebuild(self) -> None:
        """Capacities changed: every domain's dominant share is recomputed."""
        self._policy = None
        self._heap = []
        for name in self.usage:
            self._push(name)
        if not self.usage:
            raise ConfigError("tasks.weights: no domain to schedule")


def _has_signal(rewards: tuple[float, ...]) -> bool:
    """Two scored samples that differ: a group-relative advantage is not zero everywhere."""
    return len(rewards) >= 2 and max(rewards) != min(rewards)
