"""The global scheduler's parts on their own, with hand-computed expectations: `Placement`
(the in-flight orders, `lose`), `Admission` (staleness, backpressure, refills); and the rule
that no part references the rollout service that drives them."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tempering.pool import TaskDraw
from tempering.scheduler.admission import Admission
from tempering.scheduler.orders import GroupOrder
from tempering.scheduler.placement import Placement

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import test_package_layers  # noqa: E402


def order(i: int, batch: int = 0) -> GroupOrder:
    return GroupOrder(i, batch, TaskDraw("arithmetic", None, i), "", 0, 0)


def test_placement_balances_expected_tokens_per_throughput():
    p = Placement()
    p.add_replica("a", 1000.0)
    p.add_replica("b", 3000.0)
    # load / throughput: a 0/1000, b 0/3000 -> a (ties by name); then a 300/1000 > b 0 -> b; then b 0.1 < a 0.3 -> b
    placed = [p.place(order(i), 300.0).replica for i in range(3)]
    assert placed == ["a", "b", "b"]
    assert p.held_by("b") == 2 and p.holds(p.inflight[1]) and not p.holds(order(1))
    assert p.finish(1).replica == "b" and 1 not in p.inflight


def test_losing_a_replica_hands_back_its_orders_placed_on_the_others():
    p = Placement()
    p.add_replica("a")
    p.add_replica("b")
    p.add_node("b", 4)
    first = [p.place(order(i), 10.0) for i in range(4)]  # a, b, a, b
    moved = p.lose("b")
    assert sorted(o.id for o in moved) == [o.id for o in first if o.replica == "b"]
    assert {o.replica for o in moved} == {"a"} and all(p.holds(o) for o in moved)
    assert "b" not in p.nodes and not any(p.holds(o) for o in first if o.replica == "b")
    assert p.lose("a") == [] and p.inflight == {}  # none left: they wait for the next replica
    assert sorted(o.id for o in p.add_replica("c")) == [0, 1, 2, 3]
    with pytest.raises(ValueError):
        p.add_node("x", 0)


def test_admission_keeps_the_staleness_bound_and_backpressure():
    a = Admission(groups_per_batch=2, max_staleness=1, queue_size=1)
    assert [a.due(0), a.due(0), a.due(0)] == [0, 1, None]  # batch b needs version >= b - 1
    assert a.due(1) == 2
    for rewards in ((1.0, 0.0), (0.0, 1.0)):
        a.ended(0, rewards)
    assert a.is_complete(0) and a.due(5) is None  # one complete batch waits: the queue is full
    a.consumed(0)
    assert not a.is_complete(0) and a.due(5) == 3


def test_admission_gives_a_place_without_signal_to_a_refill():
    a = Admission(groups_per_batch=2, max_staleness=0, queue_size=2, refills=1)
    assert a.ended(0, (1.0, 1.0)) is True and a.refilled(0) == 1  # uniform rewards: re-drawn
    assert a.ended(0, (1.0, 1.0)) is False  # the refills are spent: it takes its place
    assert a.ended(0, (0.5, 1.0)) is False and a.is_complete(0)


def test_no_part_references_the_driver():
    _, modules, _ = test_package_layers.graph()
    for part in ("admission", "mix", "placement", "orders", "global_"):
        imported = modules[f"tempering.scheduler.{part}"]
        assert not [m for m in imported if m.startswith("tempering.rollout")], part
    assert "tempering.rollout.service" not in modules["tempering.rollout.assembler"]
