"""`LocalScheduler` driven in simulated time: dispatch orders checked against hand-computed
ones (keys = arrival - aging_s*priority + min(expected cost, aging_s)), the aging bound,
learned durations against the EMA by hand, slot shares under quotas, work conservation,
capacity changes, memory reservations, cancel, quota validation and reports."""

from __future__ import annotations

import heapq
import itertools
import math
import random

import pytest

from tempering.scheduler.local import Job, LocalScheduler


class Sim:
    """A discrete-event loop: at each instant, finishes first, then arrivals and calls in the
    order they were given, then every start the scheduler allows. A job's payload is
    (name, duration)."""

    def __init__(self, sched: LocalScheduler):
        self.s, self.heap, self.seq = sched, [], itertools.count()
        self.started: list[Job] = []  # in start order
        self.waiting: set[Job] = set()
        self.on_finish = None  # (job, t) -> None, e.g. to keep a domain flooding
        self.full_whenever_waiting = True  # every slot busy whenever a job waits (after each instant)

    def submit(self, t, domain, dur, name=None, priority=0, memory_mb=0) -> Job:
        job = Job(domain, priority, memory_mb, payload=(name or domain, dur))
        self._push(t, 1, ("submit", job))
        return job

    def call(self, t, fn) -> None:
        self._push(t, 1, ("call", fn))

    def _push(self, t, kind, item):
        heapq.heappush(self.heap, (t, kind, next(self.seq), item))

    def run(self, until=math.inf) -> "Sim":
        while self.heap and self.heap[0][0] <= until:
            t = self.heap[0][0]
            while self.heap and self.heap[0][0] == t:
                what, x = heapq.heappop(self.heap)[3]
                if what == "finish":
                    self.s.finish(x, t)
                    if self.on_finish:
                        self.on_finish(x, t)
                elif what == "submit":
                    self.s.submit(x, t)
                    self.waiting.add(x)
                else:
                    x()
            while (job := self.s.next(t)) is not None:
                assert job.started == t
                self.waiting.discard(job)
                self.started.append(job)
                self._push(t + job.payload[1], 0, ("finish", job))
            if self.waiting and self.s.running < self.s.slots:
                self.full_whenever_waiting = False
        return self

    def order(self) -> list[str]:
        return [j.payload[0] for j in self.started]

    def slot_seconds(self, t0: float, t1: float) -> dict[str, float]:
        """Slot-seconds each domain held within [t0, t1]."""
        out: dict[str, float] = {}
        for j in self.started:
            a, b = max(j.started, t0), min(j.started + j.payload[1], t1)
            if b > a:
                out[j.domain] = out.get(j.domain, 0.0) + b - a
        return out


def test_priority_orders_waiting_jobs_by_hand_computed_keys():
    """Slot full: higher priority passes, but only by aging_s per level (Z, p1, arrives too late to pass L1, L2)."""
    sim = Sim(LocalScheduler(1, aging_s=10.0, default_s=1.0))
    sim.submit(0.0, "first", 20.0)
    # keys (cost: the default guess 1.0, nothing has finished yet): L1 1.1, L2 1.2, H -8.7, X -18.6, Y -8.5, Z 3.0
    for t, name, dom, p in [(0.1, "L1", "a", 0), (0.2, "L2", "b", 0), (0.3, "H", "c", 1), (0.4, "X", "d", 2),
                            (0.5, "Y", "b", 1), (12.0, "Z", "c", 1)]:
        sim.submit(t, dom, 1.0, name, priority=p)
    sim.run()
    assert sim.order() == ["first", "X", "H", "Y", "L1", "L2", "Z"]
    assert [j.started for j in sim.started] == [0.0, 20.0, 21.0, 22.0, 23.0, 24.0, 25.0]
    assert [j.key for j in sim.started[1:]] == pytest.approx([-18.6, -8.7, -8.5, 1.1, 1.2, 3.0])


@pytest.mark.parametrize("dp, passed", [(1, 31), (3, 51)])
def test_aging_bounds_how_long_a_stream_of_higher_priority_jobs_passes(dp, passed):
    """Low job A at tA=10.25 under an endless overload of priority-dp jobs starts once those with key < its key ran."""
    aging, t_a = 5.0, 10.25
    sim = Sim(LocalScheduler(1, aging_s=aging, default_s=1.0))
    for i in range(400):  # one 1-s job every 0.5 s until t=200: the queue only grows
        sim.submit(i * 0.5, "h", 1.0, f"h{i}", priority=dp)
    low = sim.submit(t_a, "l", 1.0, "A", priority=0)
    sim.run()
    # key(A) = 10.25 + 1 (its guess: the mean of durations, all 1 s); key(h at t) = t - aging*dp + 1:
    # h passes A iff t < tA + aging*dp, so the h jobs at 0, 0.5, ..., tA + aging*dp - 0.25 pass it
    assert low.key == t_a + 1.0
    before = sim.started[:sim.started.index(low)]
    assert len(before) == passed and low.started == float(passed)  # one slot, 1-s jobs back to back from 0
    assert all(j.submitted < t_a + aging * (dp + 1) for j in before)  # the docstring's bound
    assert max(j.submitted for j in before) == t_a + aging * dp - 0.25


def test_shortest_expected_duration_first_once_learned():
    """Per-domain EMA (0.8 old + 0.2 new) orders equal-priority jobs; the cost term is capped at aging_s."""
    s = LocalScheduler(1, aging_s=100.0, default_s=1.0)
    t = 0.0
    for dom, dur in [("fast", 2.0), ("slow", 10.0), ("fast", 4.0), ("slow", 20.0)]:
        job = s.submit(Job(dom), t)
        assert s.next(t) is job
        t += dur
        s.finish(job, t)
    assert s.expected_s("fast") == pytest.approx(0.8 * 2 + 0.2 * 4)  # 2.4
    assert s.expected_s("slow") == pytest.approx(0.8 * 10 + 0.2 * 20)  # 12
    assert s.expected_s("new") == pytest.approx((2 + 10 + 4 + 20) / 4)  # a new domain's guess: the mean
    blocker = s.submit(Job("x"), t)
    assert s.next(t) is blocker
    jobs = {n: s.submit(Job(d, payload=n), t + dt) for n, d, dt in
            [("S1", "slow", 0.0), ("F1", "fast", 0.5), ("S2", "slow", 1.0), ("F2", "fast", 1.5)]}
    assert jobs["S1"].key == pytest.approx(t + 12) and jobs["F1"].key == pytest.approx(t + 2.9)
    s.finish(blocker, t + 5)
    order = []
    for i in range(4):
        job = s.next(t + 5 + i)
        order.append(job.payload)
        s.finish(job, t + 5 + i)
    assert order == ["F1", "F2", "S1", "S2"]
    capped = LocalScheduler(1, aging_s=5.0)  # same history, cost capped at 5: the slow job arriving 3 s earlier wins
    for dom, dur in [("fast", 2.0), ("slow", 10.0), ("fast", 4.0), ("slow", 20.0)]:
        job = capped.submit(Job(dom), 0.0)
        capped.next(0.0)
        capped.finish(job, dur)
    blocker = capped.submit(Job("x"), 50.0)
    capped.next(50.0)
    slow, fast = capped.submit(Job("slow"), 50.0), capped.submit(Job("fast"), 53.0)  # keys 55, 55.4
    capped.finish(blocker, 60.0)
    assert capped.next(60.0) is slow and slow.key == pytest.approx(55.0) and fast.key == pytest.approx(55.4)


def flood(sim: Sim, durations: dict[str, float], outstanding: int = 8, rng: random.Random | None = None):
    """Each domain keeps `outstanding` jobs queued or running (a replacement on every finish)."""
    def dur(d):
        return rng.expovariate(1 / durations[d]) if rng else durations[d]
    for d in durations:
        for _ in range(outstanding):
            sim.submit(0.0, d, dur(d))
    sim.on_finish = lambda job, t: sim.submit(t, job.domain, dur(job.domain))


@pytest.mark.parametrize("quotas, durations, seed, slots", [
    ({"a": 0.75, "b": 0.25}, {"a": 1.0, "b": 2.5}, None, 4),
    ({"a": 0.75, "b": 0.25}, {"a": 3.0, "b": 0.5}, 1, 4),
    ({"a": 0.5, "b": 0.3, "c": 0.2}, {"a": 2.0, "b": 1.0, "c": 4.0}, 2, 10),
])
def test_quotas_under_contention_give_slot_second_shares(quotas, durations, seed, slots):
    """Domains flooding one node get slot-seconds within 3 points of their quotas, all slots busy."""
    s = LocalScheduler(slots)
    s.set_quotas(quotas)
    sim = Sim(s)
    flood(sim, durations, rng=random.Random(seed) if seed is not None else None)
    sim.run(until=4000.0)
    used = sim.slot_seconds(600.0, 4000.0)
    total = sum(used.values())
    assert total == pytest.approx(slots * 3400.0)
    for d, q in quotas.items():
        assert abs(used[d] / total - q) < 0.03, (d, used[d] / total, q)
    assert sim.full_whenever_waiting


def test_a_quota_counts_as_at_least_one_slot():
    """0.5/0.3/0.2 on 4 slots: c's 0.2 counts as one slot (0.25), so it gets its slot, a and b share the rest."""
    s = LocalScheduler(4)
    s.set_quotas({"a": 0.5, "b": 0.3, "c": 0.2})
    sim = Sim(s)
    flood(sim, {"a": 2.0, "b": 1.0, "c": 4.0}, rng=random.Random(2))
    sim.run(until=4000.0)
    used = sim.slot_seconds(600.0, 4000.0)
    total = sum(used.values())
    assert abs(used["c"] / total - 0.25) < 0.03 and used["a"] > used["b"] > used["c"]
    s.resize(10)  # a slot is now a tenth: c is held to its 0.2 again
    sim.run(until=8000.0)
    used = sim.slot_seconds(5000.0, 8000.0)
    assert abs(used["c"] / sum(used.values()) - 0.2) < 0.03


def test_work_conserving_when_only_one_quota_domain_has_work():
    """Quota 0.25 but alone: it gets every slot, 100% utilization."""
    s = LocalScheduler(4)
    s.set_quotas({"a": 0.25, "b": 0.75})
    sim = Sim(s)
    flood(sim, {"a": 1.5})
    sim.run(until=500.0)
    assert sim.slot_seconds(0.0, 500.0) == {"a": pytest.approx(4 * 500.0)}
    assert sim.full_whenever_waiting


def test_an_idle_domain_over_quota_comes_back_once_the_others_caught_up():
    """No decay: b used 100 slot-s alone; with quota 0.2 its urgent job waits until the total reaches 500."""
    s = LocalScheduler(10, horizon_s=math.inf, default_s=1.0)
    s.set_quotas({"a": 0.8, "b": 0.2})
    sim = Sim(s)
    for i in range(100):  # t = 0..9: ten at a time
        sim.submit(0.0, "b", 1.0, f"b{i}")
    for i in range(600):
        sim.submit(10.0, "a", 1.0, f"a{i}")
    sim.submit(10.5, "b", 1.0, "urgent", priority=5)  # its key is far below every a job's
    sim.run()
    # from t=10, a takes all ten slots, 10 slot-s a second: the total (100 + 10 per start) first
    # covers b's 100 / 0.2 = 500 at the first start of t=50
    urgent = next(j for j in sim.started if j.payload[0] == "urgent")
    assert urgent.started == 50.0 and sim.full_whenever_waiting
    assert [j.payload[0] for j in sim.started if j.started == 50.0][0] == "urgent"


def test_zero_quota_domain_runs_only_when_nothing_else_waits():
    """Quota 0: though it arrived first it waits for every other job; with nothing else waiting it runs."""
    s = LocalScheduler(1)
    s.set_quotas({"a": 1.0, "z": 0.0})
    sim = Sim(s)
    sim.submit(0.0, "a", 1.0, "blocker")
    sim.submit(0.05, "z", 1.0, "z1")  # key 1.05: lower than every a job's below
    for i in range(5):
        sim.submit(0.1 + i * 0.1, "a", 1.0, f"a{i}")
    sim.submit(0.7, "z", 1.0, "z2")
    sim.submit(2.5, "a", 1.0, "a5")  # arrives while a's jobs still wait: goes before the z jobs too
    sim.submit(20.0, "z", 1.0, "z3")  # alone on an idle node: starts at once
    sim.run()
    assert sim.order() == ["blocker", "a0", "a1", "a2", "a3", "a4", "a5", "z1", "z2", "z3"]
    assert [j.started for j in sim.started[-3:]] == [7.0, 8.0, 20.0] and sim.full_whenever_waiting


def test_resize_changes_concurrency_and_running_jobs_keep_their_slots():
    """2 -> 4 slots starts two more at once; 4 -> 1 starts nothing until running < 1."""
    s = LocalScheduler(2)
    sim = Sim(s)
    for i in range(12):
        sim.submit(0.0, "a", 5.0, f"j{i}")
    peak = []
    sim.call(7.0, lambda: s.resize(4))
    sim.call(8.0, lambda: (peak.append(s.running), s.resize(1)))
    sim.run(until=30.0)
    assert [j.started for j in sim.started] == [0.0, 0.0, 5.0, 5.0, 7.0, 7.0, 12.0, 17.0, 22.0, 27.0]
    assert peak == [4] and s.running == 1 and sim.full_whenever_waiting


def test_memory_waits_in_order_and_releases_what_it_reserved():
    """A job that does not fit waits and a smaller later one does not pass it; reservations come back exactly."""
    s = LocalScheduler(4, memory_mb=1000)  # 250 MB a slot's share
    a = s.submit(Job("a", memory_mb=500), 0.0)
    assert s.next(0.0) is a and s.memory_used == 500
    b = s.submit(Job("b", memory_mb=800), 1.0)  # key 1 + 1*3.2 = 4.2
    c = s.submit(Job("c", memory_mb=100), 5.0)  # key 6: after b, and would fit, but does not pass it
    assert b.key == pytest.approx(4.2) and s.next(5.0) is None and s.running == 1
    s.finish(a, 6.0)
    assert s.next(6.0) is b and s.next(6.0) is c and s.memory_used == 900
    big = s.submit(Job("d", memory_mb=5000), 7.0)  # more than the node: reserves all of it, runs alone
    s.finish(b, 8.0)
    s.finish(c, 8.0)
    assert s.next(8.0) is big and s.memory_used == 1000
    s.submit(Job("e", memory_mb=1), 8.0)
    assert s.next(8.0) is None
    s.resize(4, memory_mb=3000)  # a bigger node meanwhile: d gives back the 1000 MB it reserved, no more
    s.finish(big, 9.0)
    assert s.memory_used == 0
    assert s.next(9.0).domain == "e" and s.memory_used == 1


def test_cancel_takes_a_queued_job_out():
    """A cancelled job never starts; cancelling a started or already-cancelled job returns False."""
    s = LocalScheduler(1)
    a, b, c = (s.submit(Job(d), t) for d, t in [("a", 0.0), ("b", 0.1), ("c", 0.2)])
    assert s.next(0.0) is a
    assert s.cancel(b) and not s.cancel(b) and not s.cancel(a)
    assert s.report().queued_by_domain == {"c": 1}
    s.finish(a, 1.0)
    assert s.next(1.0) is c and b.started is None and s.next(1.0) is None


@pytest.mark.parametrize("share", [1.5, -0.1, float("nan")])
def test_set_quotas_rejects_shares_outside_unit_interval(share):
    """The message names the domain; nothing is applied."""
    s = LocalScheduler(2)
    s.set_quotas({"ok": 0.5})
    with pytest.raises(ValueError, match="slot quota of code"):
        s.set_quotas({"ok": 0.2, "code": share})
    assert s._domains["ok"].share == 0.5


def test_report_returns_waits_and_resets_them():
    """Waits per domain since the last report, busy slot-seconds, the queue; a second report is empty."""
    s = LocalScheduler(2)
    jobs = [s.submit(Job(d), t) for d, t in [("a", 0.0), ("b", 1.0), ("a", 2.0), ("b", 3.0)]]
    assert s.next(3.0) is jobs[0] and s.next(3.0) is jobs[1]
    s.finish(jobs[0], 5.0)
    assert s.next(5.0) is jobs[2]
    r = s.report()
    assert r.waits == {"a": [3.0, 3.0], "b": [2.0]} and sorted(r.all_waits) == [2.0, 3.0, 3.0]
    assert (r.slots, r.running, r.queued, r.queued_by_domain, r.busy_s) == (2, 2, 1, {"b": 1}, 2.0)
    r = s.report()
    assert r.waits == {} and r.busy_s == 0.0 and r.queued == 1


def test_usage_decay_survives_a_run_many_horizons_long():
    """exp(elapsed/horizon_s) would overflow after ~710 horizons; the rescaling must keep it finite."""
    s = LocalScheduler(1, horizon_s=1.0)
    s.set_quotas({"a": 0.5, "b": 0.5})
    sim = Sim(s)
    flood(sim, {"a": 1.0, "b": 1.0}, outstanding=2)
    sim.run(until=2000.0)
    used = sim.slot_seconds(1900.0, 2000.0)
    assert used == {"a": pytest.approx(50.0), "b": pytest.approx(50.0)}
    idle = LocalScheduler(1, horizon_s=1.0)  # and after an idle spell of 1000 horizons
    for t in (0.0, 1000.0):
        job = idle.submit(Job("a"), t)
        assert idle.next(t) is job
        idle.finish(job, t + 1.0)
