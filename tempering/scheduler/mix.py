"""`Mix`: which domain the next group comes from (weighted dominant resource fairness), at which
difficulty level (`Curriculum`).

A domain's usage of each resource (generated tokens, as seconds of the engine replicas'
throughput; sandbox seconds, as seconds of all the nodes' slots; groups, as seconds of the rate
at which the trainer takes them, since every group takes a place in a batch however little it
cost to generate) is charged with the domain's expected cost when its group starts and
corrected by what it used when it ends, decays over `horizon` groups, and the largest of the
three, divided by the domain's weight, is what fairness equalises. So `tasks.weights` are shares
of the resources, and a domain whose groups are expensive gets fewer of them. Weights adapt and
domains move up levels as `Curriculum` says; priorities break ties (and order a batch's groups).
It also gives each sandbox node its domains' slot quotas (`node_policy`). The capacities it
normalises by are given to it (`capacity`); it places and admits nothing.
"""

from __future__ import annotations

import heapq
import math
from collections import Counter
from typing import Mapping

from tempering.config import ConfigError, SchedulerConfig
from tempering.jsonvalue import JSON, JSONObject
from tempering.pool import TaskPool
from tempering.scheduler.curriculum import Curriculum
from tempering.scheduler.orders import GroupReport, NodePolicy
from tempering.tasks.registry import matching

_RENORM = 1e100


def resolve_priorities(priorities: Mapping[str, int], mix: Mapping[str, object]) -> dict[str, int]:
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


class Mix:
    def __init__(self, cfg: SchedulerConfig, pool: TaskPool, tokens_per_group: float = 64.0,
                 group_rate: float = 50.0):
        self.cfg = cfg
        names = list(pool.weights)
        self.horizon = cfg.horizon or max(2000, 100 * len(names))
        self._policy: NodePolicy | None = None  # cached until weights or capacities change
        self.priorities = resolve_priorities(cfg.priorities, pool.domains)
        self.curriculum = Curriculum(cfg, pool.weights, pool.levels)
        self.sandboxed = {n for n in names if pool.domains[n].sandbox}
        self.group_rate = group_rate  # groups per second the trainer takes (its batches' places)
        self._tokens_per_s, self._slots = 1.0, 1  # the replicas' and nodes' totals (`capacity`)
        self._charged: dict[int, tuple[str, float, float]] = {}  # order -> (domain, tokens, sandbox s) at its start
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
    def capacity(self, tokens_per_s: float, slots: int) -> None:
        """The replicas' tokens per second and the nodes' slots now: every share is recomputed."""
        self._tokens_per_s, self._slots = tokens_per_s or 1.0, slots or 1
        self._rebuild()

    def measured_group_rate(self, groups_per_s: float) -> None:
        """The groups per second the trainer took (a batch's groups over the wall time since the
        previous batch), averaged into what the groups resource is normalised by."""
        if groups_per_s > 0:
            self.group_rate = 0.8 * self.group_rate + 0.2 * groups_per_s
            self._rebuild()

    # -- choosing --------------------------------------------------------------------------------------
    def start(self, order: int) -> tuple[str, int, float]:
        """Order `order`'s domain: the one fairness picks, charged its expected cost. -> (domain,
        its level now, the group's expected tokens)."""
        name = self.pick()
        level = self.curriculum.level(name)
        tokens, sandbox_s = self.cost[name]
        self._charge(name, tokens, sandbox_s, 1.0)
        self._flying[name] += 1
        self._orders_made += 1
        self._charged[order] = (name, tokens, sandbox_s)
        return name, level, tokens

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

    def ended(self, report: GroupReport) -> None:
        """A group ended: correct its domain's usage, learn its costs, feed the curriculum."""
        name, tokens, sandbox_s = self._charged.pop(report.order)
        self._flying[name] -= 1
        # take back what its start charged (the cost estimate may have moved since), charge what it used
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

    def node_policy(self) -> NodePolicy:
        """The sandbox domains' shares of every node's slots (their weights among themselves)."""
        if self._policy is None:
            weights = self.curriculum.weights()
            total = sum(weights[n] for n in self.sandboxed)
            self._policy = NodePolicy({n: weights[n] / total for n in sorted(self.sandboxed)} if total else {},
                                      {n: p for n, p in self.priorities.items() if p})
        return self._policy

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

    def state_dict(self) -> JSONObject:  # saved in a checkpoint's state.json
        g = self._growth()
        return {"curriculum": self.curriculum.state_dict(), "cost": self.cost, "learned": sorted(self._learned),
                "usage": {n: [x / g for x in u] for n, u in self.usage.items()}}

    def load_state_dict(self, state: Mapping[str, JSON]) -> None:
        self.curriculum.load_state_dict(state["curriculum"])
        g = self._growth()
        for name in self.usage:
            if name in state["usage"]:
                self.usage[name] = [x * g for x in state["usage"][name]]
                self.cost[name] = list(state["cost"][name])
        self._learned = set(state["learned"]) & set(self.usage)
        self._rebuild()

    # -- internals -----------------------------------------------------------------------------------------
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
        u = self.usage[name]
        return max(u[0] / self._tokens_per_s, u[1] / self._slots, u[2] / self.group_rate)

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
