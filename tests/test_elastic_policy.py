"""The elastic replicas' policy (`runtime.elastic`) on hand-computed sequences of observations:
its fractions, the direction each observation points to, hysteresis (patience in a row, then a
cooldown), the bounds, and holding while a change is under way."""

from __future__ import annotations

import pytest

from tempering.runtime.elastic import REASONS, ElasticPolicy, Observation

# trainer cycles of 10 s: WAITS waits 8 of them (0.8 >= up_wait 0.3); BUSY waits 0 and the
# engines generated 4 s over 2 replicas x 10 s (idle 0.8 >= down_idle 0.6); MIDDLE waits 1 s
# (0.1) with engines generating 10 of 20 s (idle 0.5): neither
WAITS = dict(wait_s=8.0, work_s=2.0, generate_s=16.0)
BUSY = dict(wait_s=0.0, work_s=10.0, generate_s=4.0)
MIDDLE = dict(wait_s=1.0, work_s=9.0, generate_s=10.0)


def policy(patience=3, cooldown=2, lo=1, hi=4):
    return ElasticPolicy(lo, hi, up_wait=0.3, down_idle=0.6, patience=patience, cooldown=cooldown)


def actions(p, seq):
    return [(d.action, d.reason, d.replicas) for d in (p.observe(Observation(replicas=n, **o)) for o, n in seq)]


def test_fractions_of_the_trainer_cycle():
    assert Observation(8.0, 2.0, 16.0, 2).wait_fraction == pytest.approx(0.8)
    assert Observation(8.0, 2.0, 16.0, 2).idle_fraction == pytest.approx(0.2)  # 1 - 16 / (2 x 10)
    assert Observation(0.0, 10.0, 4.0, 2).idle_fraction == pytest.approx(0.8)
    assert Observation(0.0, 10.0, 30.0, 2).idle_fraction == 0.0  # reports lag: never below 0
    assert Observation(0.0, 0.0, 0.0, 1).wait_fraction == 0.0 and Observation(0.0, 0.0, 0.0, 1).idle_fraction == 0.0


def test_a_trainer_that_waits_adds_one_replica_after_patience_then_cools_down():
    p = policy()
    got = actions(p, [(WAITS, 1), (WAITS, 1), (WAITS, 1), (WAITS, 2), (WAITS, 2), (WAITS, 2), (WAITS, 2), (WAITS, 2)])
    assert got == [("hold", "streak", 1), ("hold", "streak", 1), ("add", "trainer_waits", 2),
                   ("hold", "cooldown", 2), ("hold", "cooldown", 2),  # cooldown 2: two ignored
                   ("hold", "streak", 2), ("hold", "streak", 2), ("add", "trainer_waits", 3)]


def test_a_busy_trainer_drains_one_replica_at_a_time_down_to_the_minimum():
    p = policy(patience=2, cooldown=1)
    got = actions(p, [(BUSY, 3), (BUSY, 3), (BUSY, 2), (BUSY, 2), (BUSY, 2), (BUSY, 1), (BUSY, 1), (BUSY, 1)])
    assert got == [("hold", "streak", 3), ("remove", "trainer_bottleneck", 2), ("hold", "cooldown", 2),
                   ("hold", "streak", 2), ("remove", "trainer_bottleneck", 1), ("hold", "cooldown", 1),
                   ("hold", "at_min", 1), ("hold", "at_min", 1)]


def test_hysteresis_a_broken_streak_starts_again():
    """Observations that alternate, or one in the middle, never reach the patience."""
    p = policy(patience=3)
    flapping = [(WAITS, 2), (BUSY, 2), (WAITS, 2), (BUSY, 2), (WAITS, 2), (WAITS, 2), (MIDDLE, 2), (WAITS, 2),
                (WAITS, 2)]
    got = actions(p, flapping)
    assert [a for a, _, _ in got] == ["hold"] * 9
    assert [r for _, r, _ in got] == ["streak"] * 6 + ["steady", "streak", "streak"]
    assert p.observe(Observation(replicas=2, **WAITS)).action == "add"  # the third WAITS in a row


def test_at_the_maximum_a_waiting_trainer_adds_nothing():
    p = policy(patience=1, hi=2)
    assert actions(p, [(WAITS, 2), (WAITS, 2)]) == [("hold", "at_max", 2), ("hold", "at_max", 2)]


def test_nothing_is_decided_while_a_replica_starts_or_drains():
    p = policy(patience=2)
    p.observe(Observation(replicas=1, **WAITS))
    d = p.observe(Observation(replicas=1, changing=1, **WAITS))
    assert (d.action, d.reason) == ("hold", "changing")
    # the streak started over: two more in a row are needed
    assert [p.observe(Observation(replicas=1, **WAITS)).action for _ in range(2)] == ["hold", "add"]


def test_a_decision_as_numbers_for_the_metrics():
    p = policy(patience=1)
    obs = Observation(replicas=2, **BUSY)
    record = p.observe(obs).record(obs)
    assert record == {"replicas": 2, "changing": 0, "target": 1, "wait_fraction": 0.0, "idle_fraction": 0.8, "streak": 1,
                      "decision": -1, "reason": REASONS.index("trainer_bottleneck")}


@pytest.mark.parametrize("lo, hi, patience, cooldown", [(0, 2, 1, 0), (3, 2, 1, 0), (1, 2, 0, 0), (1, 2, 1, -1)])
def test_bad_bounds_are_refused(lo, hi, patience, cooldown):
    with pytest.raises(ValueError, match="elastic replicas"):
        ElasticPolicy(lo, hi, 0.3, 0.6, patience, cooldown)
