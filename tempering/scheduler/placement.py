"""`Placement`: where groups run, and the only record of the groups in flight.

It holds the engine replicas (with the tokens per second each generates), the sandbox nodes
(with their slots) and every order placed and not yet finished. A group goes to the replica
with the least expected work in flight per unit of throughput. Replicas and nodes may join and
leave while running: `lose(replica)` returns the orders it held, placed anew on the others (none
while no replica is left: they wait for the next one to join, which `add_replica` returns them
to). It chooses no domain and admits nothing.
"""

from __future__ import annotations

import dataclasses
from collections import Counter

from tempering.scheduler.orders import GroupOrder


class Placement:
    def __init__(self) -> None:
        self.replicas: dict[str, float] = {}  # name -> tokens per second it generates
        self.nodes: dict[str, int] = {}  # name -> sandbox slots
        self.inflight: dict[int, GroupOrder] = {}  # order id -> the order as placed last
        self._load: Counter = Counter()  # replica -> expected tokens in flight
        self._tokens: dict[int, float] = {}  # order id -> its expected tokens
        self._homeless: list[GroupOrder] = []  # orders whose replica left while none remained

    @property
    def tokens_per_s(self) -> float:
        return sum(self.replicas.values())

    @property
    def slots(self) -> int:
        return sum(self.nodes.values())

    def add_replica(self, name: str, tokens_per_s: float = 1000.0) -> list[GroupOrder]:
        """An engine replica joins. -> orders left without a replica earlier, now placed on it."""
        if tokens_per_s <= 0:
            raise ValueError(f"replica {name}: throughput must be > 0, got {tokens_per_s!r}")
        self.replicas[name] = tokens_per_s
        homeless, self._homeless = self._homeless, []
        return [self._put(o) for o in homeless]

    def measured(self, name: str, tokens_per_s: float) -> bool:
        """A replica's measured throughput, averaged into its own. -> whether it changed."""
        if tokens_per_s > 0 and name in self.replicas:
            self.replicas[name] = 0.8 * self.replicas[name] + 0.2 * tokens_per_s
            return True
        return False

    def lose(self, name: str) -> list[GroupOrder]:
        """Replica `name` (and its sandbox node, if any) left; its groups in flight are lost there.
        -> them, placed on the others, to send again (none if no replica is left)."""
        self.replicas.pop(name, None)  # absent when it was draining (`retire`)
        self.nodes.pop(name, None)
        self._load.pop(name, None)
        lost = [o for o in self.inflight.values() if o.replica == name]
        if self.replicas:
            return [self._put(o) for o in lost]
        self._homeless += lost
        for o in lost:
            del self.inflight[o.id]
        return []

    def retire(self, name: str) -> None:
        """Replica `name` (and its sandbox node) takes no new group: it drains. The groups it
        holds stay placed on it until they finish (`lose` still re-places them if it dies)."""
        del self.replicas[name]
        self.nodes.pop(name, None)

    def add_node(self, name: str, slots: int) -> None:
        if slots < 1:
            raise ValueError(f"sandbox node {name}: slots must be >= 1, got {slots!r}")
        self.nodes[name] = slots

    def remove_node(self, name: str) -> None:
        del self.nodes[name]

    def place(self, order: GroupOrder, tokens: float) -> GroupOrder:
        """`order` on the least-loaded replica (kept for one to join if there is none)."""
        self._tokens[order.id] = tokens
        return self._put(order)

    def finish(self, order_id: int) -> GroupOrder:
        """A group ended. -> its order as placed."""
        order = self.inflight.pop(order_id)
        self._load[order.replica] -= self._tokens.pop(order_id)
        return order

    def holds(self, order: GroupOrder) -> bool:
        """Whether `order` is in flight where it says it runs (not finished, not moved since)."""
        placed = self.inflight.get(order.id)
        return placed is not None and placed.replica == order.replica

    def held_by(self, replica: str) -> int:
        return sum(1 for o in self.inflight.values() if o.replica == replica)

    def _put(self, order: GroupOrder) -> GroupOrder:
        if not self.replicas:
            self._homeless.append(order)
            return order
        replica = min(self.replicas, key=lambda r: (self._load[r] / self.replicas[r], r))
        self._load[replica] += self._tokens[order.id]
        placed = dataclasses.replace(order, replica=replica)
        self.inflight[order.id] = placed
        return placed
