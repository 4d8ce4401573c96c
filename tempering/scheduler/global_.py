"""`GlobalScheduler`: which groups start, in which domain, at which level, and where; the three
parts composed, and the task pool they draw from.

`admission.Admission` says which batch may start (staleness bound, backpressure, refills),
`mix.Mix` which domain each of its groups comes from and at which level (weighted DRF and the
curriculum), `placement.Placement` which replica runs it (and holds every order in flight).
This module draws the task and keeps the parts' views of capacity in step: a replica or node
that joins or leaves changes what the mix's shares are normalised by. Priorities order a
batch's groups (higher first). It runs no group itself and knows nothing of how a node orders
its jobs (`scheduler.local`), nor of the rollout service that drives it.
"""

from __future__ import annotations

import itertools
from typing import Mapping

from tempering.config import SchedulerConfig, TasksConfig
from tempering.jsonvalue import JSON, JSONObject
from tempering.pool import TaskPool
from tempering.scheduler.admission import Admission
from tempering.scheduler.mix import Mix
from tempering.scheduler.orders import GroupOrder, GroupReport, NodePolicy
from tempering.scheduler.placement import Placement


class GlobalScheduler:
    def __init__(self, tasks: TasksConfig, cfg: SchedulerConfig, groups_per_batch: int, max_staleness: int,
                 queue_size: int, first_batch: int = 0, last_batch: int | None = None,
                 tokens_per_group: float = 64.0, pool: TaskPool | None = None,
                 group_rate: float = 50.0, refills: int = 0):
        self.pool = pool if pool is not None else TaskPool(tasks, seed_offset=first_batch)
        self.admission = Admission(groups_per_batch, max_staleness, queue_size, first_batch, last_batch, refills)
        self.mix = Mix(cfg, self.pool, tokens_per_group, group_rate)
        self.placement = Placement()
        self._replacements: list[GroupOrder] = []  # ordered by `complete`, handed out by `admit`
        self._ids = itertools.count()
        self.ordered = 0  # groups admitted and ordered in this process (re-drawn ones included)

    # -- capacity ---------------------------------------------------------------------------------------
    def add_replica(self, name: str, tokens_per_s: float = 1000.0) -> list[GroupOrder]:
        """An engine replica joins. -> orders left without a replica earlier, now given to it."""
        moved = self.placement.add_replica(name, tokens_per_s)
        self._capacity()
        return moved

    def measured(self, name: str, tokens_per_s: float) -> None:
        """A replica's measured throughput (tokens per second of generation), averaged into
        what the token resource is normalised by."""
        if self.placement.measured(name, tokens_per_s):
            self._capacity()

    def lose(self, name: str) -> list[GroupOrder]:
        """Replica `name` (and its sandbox node) left. -> its groups in flight, placed on the
        others, to send again (none if no replica is left: they wait for the next one to join)."""
        moved = self.placement.lose(name)
        self._capacity()
        return moved

    def retire(self, name: str) -> None:
        """Replica `name` (and its sandbox node) drains: no new group goes to it, and the groups
        it holds finish there. It leaves once it holds none (`placement.held_by`)."""
        self.placement.retire(name)
        self._capacity()

    def add_node(self, name: str, slots: int) -> None:
        self.placement.add_node(name, slots)
        self._capacity()

    def remove_node(self, name: str) -> None:
        self.placement.remove_node(name)
        self._capacity()

    def node_policy(self) -> NodePolicy:
        return self.mix.node_policy()

    # -- admission ----------------------------------------------------------------------------------------
    def admit(self, version: int) -> list[GroupOrder]:
        """The groups of every batch the staleness bound and the buffer admit at `version`
        (none without a replica), after the groups re-drawn since the last call."""
        out, self._replacements = self._replacements, []
        while self.placement.replicas and (batch := self.admission.due(version)) is not None:
            orders = [self.order(batch, version) for _ in range(self.admission.groups_per_batch)]
            out += sorted(orders, key=lambda o: -o.priority)  # stable: picks keep their order otherwise
        return out

    def order(self, batch: int, version: int = 0) -> GroupOrder:
        """One group: the domain fairness picks, a task at its level, the least-loaded replica."""
        order_id = next(self._ids)
        self.ordered += 1
        name, level, tokens = self.mix.start(order_id)
        task = self.pool.next_draw(name, level if self.pool.domains[name].levels > 1 else None)
        order = GroupOrder(order_id, batch, task, "", self.mix.priorities[name], level, version)
        return self.placement.place(order, tokens)

    def complete(self, report: GroupReport) -> GroupOrder:
        """A group ended: the mix learns from it, and its batch's place is filled or re-drawn."""
        order = self.placement.finish(report.order)
        self.mix.ended(report)
        if self.admission.ended(order.batch, report.rewards):  # this group's place goes to a new one
            replacement = self.order(order.batch, order.version)
            if replacement.replica:  # otherwise it waits with the homeless for a replica to join
                self._replacements.append(replacement)
        return order

    def is_complete(self, batch: int) -> bool:
        return self.admission.is_complete(batch)

    def consumed(self, batch: int) -> None:
        self.admission.consumed(batch)

    # -- reports ----------------------------------------------------------------------------------------
    def metrics(self) -> dict[str, dict[str, float]]:
        return self.mix.metrics()

    def state_dict(self) -> JSONObject:  # saved in a checkpoint's state.json
        return self.mix.state_dict()

    def load_state_dict(self, state: Mapping[str, JSON]) -> None:
        self.mix.load_state_dict(state)

    def _capacity(self) -> None:
        self.mix.capacity(self.placement.tokens_per_s, self.placement.slots)
