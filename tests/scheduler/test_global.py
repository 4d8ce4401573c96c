"""`GlobalScheduler` driven by hand (no processes, no model): admission (staleness, backpressure,
last batch), dominant-resource fairness against hand-derived group ratios, priorities, config
errors, adaptive weights, the arithmetic curriculum, replicas and nodes joining and leaving,
state round trips and node policies. Test domains are registered per test and removed after."""

from __future__ import annotations

import json
import re
from collections import Counter

import pytest

from tempering.config import ConfigError, SchedulerConfig, TasksConfig, load_config
from tempering.errors import UserError
from tempering.records import Task
from tempering.scheduler.global_ import GlobalScheduler
from tempering.scheduler.orders import GroupReport
from tempering.tasks import Domain, registry
from tempering.tasks.answers import exact_answer

# per-group (generated tokens, sandbox seconds) each test domain reports
COST = {"zsched/tok": (1000, 0.0), "zsched/lite": (100, 0.0), "zsched/easy": (100, 0.0), "zsched/hard": (100, 0.0),
        "zsched/box": (100, 8.0), "zsched/box2": (100, 8.0), "arithmetic": (100, 0.0), "zsched/free": (0, 0.0)}
SIGNAL = ((1.0, 0.0), (1.0, 0.0))  # (outcomes, rewards): pass rate 0.5, rewards differ


def _domain(name: str, **kw) -> Domain:
    return Domain(name, "a scheduler test domain", exact_answer,
                  make=lambda rng: Task(id="", domain=name, prompt=f"{name} {rng.random()}", answer="a"), **kw)


@pytest.fixture(autouse=True)
def zsched_domains(monkeypatch):
    """Registered for one test only (other tests list families and match `toy`, `arithmetic`...)."""
    registry.load_plugins()
    for name in COST:
        if name.startswith("zsched/"):
            monkeypatch.setitem(registry._DOMAINS, name, _domain(name, sandbox=name.startswith("zsched/box")))


def make(weights, groups=4, staleness=0, queue=1, last=None, replicas=("r0",), nodes=(("n0", 4),), **cfg):
    cfg.setdefault("horizon", 10**9)  # no decay unless a test asks for it
    s = GlobalScheduler(TasksConfig(weights=weights, eval_per_domain=64), SchedulerConfig(**cfg), groups, staleness,
                        queue, last_batch=last)
    for r in replicas:
        s.add_replica(r, 1000.0)
    for n, slots in nodes:
        s.add_node(n, slots)
    return s


def report(s, order, scores=SIGNAL):
    tokens, sandbox_s = COST[order.task.domain]
    outcomes, rewards = scores(order) if callable(scores) else scores
    return s.complete(GroupReport(order.id, tokens, sandbox_s, tuple(outcomes), tuple(rewards)))


def drive(s, batches, scores=SIGNAL):
    """Admit one batch at a time, complete every group, hand the batch to the trainer."""
    out = []
    for _ in range(batches):
        orders = s.admit(s.admission.next_batch)
        for o in orders:
            report(s, o, scores)
        s.consumed(orders[0].batch)
        out += orders
    return out


def test_admission_keeps_the_staleness_bound_and_stops_at_the_last_batch():
    """Batch b starts only once b <= version + max_staleness, none at or past last_batch, none without a replica."""
    s = make({"zsched/lite": 1.0}, groups=2, staleness=1, queue=3, last=4, replicas=())
    assert s.admit(0) == []
    s.add_replica("r0")
    assert [o.batch for o in s.admit(0)] == [0, 0, 1, 1]
    assert s.admit(0) == []
    assert [o.batch for o in s.admit(1)] == [2, 2]
    assert [o.batch for o in s.admit(10)] == [3, 3]
    assert s.admit(11) == []


def test_backpressure_holds_admission_until_the_trainer_consumes():
    """queue_size complete-but-unconsumed batches stop admission; `consumed` releases it."""
    s = make({"zsched/lite": 1.0}, groups=2, staleness=1, queue=2)
    first = s.admit(0)
    for o in first:
        report(s, o)
    assert s.admit(5) == []  # batches 0 and 1 wait for the trainer, though the bound allows up to 6
    s.consumed(0)
    later = s.admit(5)
    assert [o.batch for o in later] == [2, 2, 3, 3, 4, 4, 5, 5, 6, 6]
    report(s, later[0])  # half of batch 2: not complete, admission goes on
    assert [o.batch for o in s.admit(6)] == [7, 7]
    report(s, later[1])  # batch 2 complete: two batches wait again
    assert s.admit(9) == []
    s.consumed(1), s.consumed(2)
    assert [o.batch for o in s.admit(7)] == [8, 8]


def test_weighted_drf_reaches_target_dominant_shares():
    """Weights 2:1:1; per group tok uses 1 replica-second, lite 0.1, box 2 slot-seconds (8 s / 4 slots)."""
    s = make({"zsched/tok": 2.0, "zsched/lite": 1.0, "zsched/box": 1.0}, groups=10)
    counts = Counter(o.task.domain for o in drive(s, 50))
    # n_tok * 1.0 / 2 = n_lite * 0.1 / 1 = n_box * 2.0 / 1 and 500 groups in all -> 80 : 400 : 20
    for name, n in {"zsched/tok": 80, "zsched/lite": 400, "zsched/box": 20}.items():
        assert abs(counts[name] - n) <= 2, counts
    target, achieved = s.mix.shares()
    assert target == pytest.approx({"zsched/tok": 0.5, "zsched/lite": 0.25, "zsched/box": 0.25})
    assert achieved == pytest.approx(target, abs=0.02)


def test_a_group_that_costs_nothing_to_generate_still_takes_trainer_capacity():
    """Groups of 0 tokens (a prompt past the context) cost 1/50 s of the trainer's intake, others 0.1 s of engine: 5:1, not all."""
    s = make({"zsched/free": 1.0, "zsched/lite": 1.0}, groups=6)
    assert s.mix.group_rate == 50.0
    counts = Counter(o.task.domain for o in drive(s, 100))
    assert counts["zsched/free"] == pytest.approx(500, abs=2) and counts["zsched/lite"] == pytest.approx(100, abs=2)
    s.mix.measured_group_rate(10.0)  # a slower trainer (50 -> 42 groups/s): a free group costs more of it
    assert s.mix.group_rate == pytest.approx(42.0)


def test_usage_and_replica_load_are_what_groups_used():
    """A group's start charge is taken back exactly at its end, even after the cost estimate moved."""
    s = make({"zsched/tok": 1.0, "zsched/lite": 1.0}, groups=8, replicas=("r0", "r1"))
    first = drive(s, 1)
    assert Counter(o.task.domain for o in first) == {"zsched/tok": 4, "zsched/lite": 4}
    # 4 x 1000 and 4 x 100 tokens, whatever the estimates were when they started
    assert s.mix.shares()[1] == pytest.approx({"zsched/tok": 4000 / 4400, "zsched/lite": 400 / 4400}, rel=1e-6)
    assert Counter(o.replica for o in s.admit(s.admission.next_batch)) == {"r0": 4, "r1": 4}  # nothing left in flight


def test_a_short_horizon_renormalises_instead_of_overflowing():
    """horizon=1 over 1000 groups: decayed usage stays finite and equal-cost domains still alternate."""
    s = make({"zsched/lite": 1.0, "zsched/easy": 1.0}, groups=10, horizon=1)
    picks = [o.task.domain for o in drive(s, 100)]
    assert sum(s.mix.shares()[1].values()) == pytest.approx(1.0)
    assert Counter(picks[-100:]) == {"zsched/lite": 50, "zsched/easy": 50}


def test_priorities_order_a_batch_and_resolve_families_and_globs():
    """Higher priority first within a batch; a domain's key beats its family's; unknown keys are errors."""
    s = make({"zsched/tok": 1.0, "zsched/lite": 1.0, "zsched/box": 1.0}, groups=8,
             priorities={"zsched/box": 5, "zsched/lite": 1})
    batch = s.admit(0)
    names = [o.task.domain for o in batch]
    assert set(names) == {"zsched/tok", "zsched/lite", "zsched/box"}
    rank = {"zsched/box": 0, "zsched/lite": 1, "zsched/tok": 2}
    assert names == sorted(names, key=rank.get)
    assert [o.priority for o in batch] == sorted((o.priority for o in batch), reverse=True)
    mix = {"zsched/tok": 1.0, "zsched/lite": 1.0, "arithmetic": 1.0}
    assert make(mix, priorities={"zsched": 3, "zsched/lite": 7}).mix.priorities == {
        "zsched/tok": 3, "zsched/lite": 7, "arithmetic": 0}
    assert make(mix, priorities={"zsched/t*": 2}).mix.priorities == {"zsched/tok": 2, "zsched/lite": 0, "arithmetic": 0}
    for key in ("sorting", "nosuch", "zsched/b*"):  # sorting exists, but is not in the mix
        with pytest.raises(UserError, match=re.escape(f"scheduler.priorities.{key}: no domain")):
            make(mix, priorities={key: 1})


@pytest.mark.parametrize("bad", [-1.0, 0, 0.0, float("inf"), float("nan"), "2", None])
def test_bad_domain_weights_are_errors_naming_the_key(bad):
    """tasks.weights must be finite numbers > 0."""
    with pytest.raises(ConfigError, match=re.escape("tasks.weights.zsched/lite")):
        TasksConfig(weights={"zsched/tok": 1.0, "zsched/lite": bad})


@pytest.mark.parametrize("value", ["-1", "0", "inf", "nan", "true", '"heavy"'])
def test_bad_domain_weights_from_the_command_line(value):
    """The same through overrides (TOML values, bools included)."""
    with pytest.raises(ConfigError, match=re.escape("tasks.weights.arithmetic")):
        load_config(None, [f"--tasks.weights.arithmetic={value}"])


@pytest.mark.parametrize("key,value", [
    ("window", 1), ("window", 2.5), ("floor", 0.0), ("floor", 1.5), ("floor", float("nan")), ("promote_at", 0.0),
    ("promote_at", 1.01), ("horizon", -1), ("horizon", 10.0), ("aging_s", 0.0), ("priorities", {"zsched/box": 1.5})])
def test_bad_scheduler_values_are_errors_naming_the_key(key, value):
    """Each SchedulerConfig check names its key."""
    name = f"scheduler.{key}" + (".zsched/box" if key == "priorities" else "")
    with pytest.raises(ConfigError, match=re.escape(name)):
        SchedulerConfig(**{key: value})
    if key != "priorities":
        with pytest.raises(ConfigError, match=re.escape(f"scheduler.{key}")):
            load_config(None, [f"--scheduler.{key}=\"x\""])


def _by_domain(order):
    return {"zsched/easy": ((1.0, 1.0), (1.0, 1.0)), "zsched/hard": ((0.0, 0.0), (0.0, 0.0))}.get(
        order.task.domain, SIGNAL)


def test_adaptive_weights_follow_the_learning_signal():
    """Solved and unsolvable domains drop to floor * base; the one with signal then takes most new orders."""
    mix = {"zsched/easy": 1.0, "zsched/hard": 1.0, "zsched/lite": 1.0}
    s = make(mix, groups=3, window=8, floor=0.1)
    n = Counter(o.task.domain for o in drive(s, 8, _by_domain))
    assert s.metrics()["weight"] == pytest.approx({"zsched/easy": 0.1, "zsched/hard": 0.1, "zsched/lite": 1.0})
    assert s.mix.shares()[0]["zsched/lite"] == pytest.approx(1 / 1.2)
    # equal costs: 120 more groups leave (n_easy + a) / 0.1 = n_lite + c = (n_hard + b) / 0.1, a + b + c = 120
    a = (120 + n["zsched/hard"] + n["zsched/lite"] - 11 * n["zsched/easy"]) / 12
    b = n["zsched/easy"] + a - n["zsched/hard"]
    later = Counter(o.task.domain for o in drive(s, 40, _by_domain))
    assert abs(later["zsched/easy"] - a) <= 1 and abs(later["zsched/hard"] - b) <= 1, (n, later, a, b)
    assert later["zsched/lite"] >= 100, later
    fixed = make(mix, groups=3, window=8, adaptive=False)
    drive(fixed, 8, _by_domain)
    assert fixed.metrics()["weight"] == {n: 1.0 for n in mix}
    assert Counter(o.task.domain for o in drive(fixed, 40, _by_domain)) == {n: 40 for n in mix}


def _next(s, outcomes=None):
    (o,) = s.admit(s.admission.next_batch)
    if outcomes is not None:
        report(s, o, (outcomes, outcomes))
        s.consumed(o.batch)
    return o


def test_curriculum_moves_arithmetic_up_its_levels():
    """Level 0 single-digit sums; promotion only after a full window at >= promote_at; stops at the top."""
    s = make({"arithmetic": 1.0}, groups=1, window=4, promote_at=0.75)
    for _ in range(3):
        o = _next(s, (1.0, 1.0))
        assert o.level == 0 and re.fullmatch(r"\d\+\d=", o.task.make().prompt), o.task.make().prompt
        assert s.mix.curriculum.level("arithmetic") == 0  # the window is not full yet
    _next(s, (1.0, 1.0))
    assert s.mix.curriculum.level("arithmetic") == 1 and s.metrics()["level"]["arithmetic"] == 1.0
    assert s.mix.curriculum.pass_rate("arithmetic") is None  # the window starts afresh
    prompts = []
    for passed in (0.5, 0.5, 0.5, 0.5, 1.0):  # window means 0.5, then 0.625: < 0.75
        o = _next(s, (passed, passed))
        prompts.append(o.task.make().prompt)
        assert o.level == 1 and s.mix.curriculum.level("arithmetic") == 1
    _next(s, (1.0, 1.0))  # [0.5, 0.5, 1, 1] -> 0.75
    assert s.mix.curriculum.level("arithmetic") == 2
    top = [_next(s, (1.0, 1.0)) for _ in range(40)]
    assert s.mix.curriculum.level("arithmetic") == 2 and {o.level for o in top} == {2}
    assert all(re.fullmatch(r"\d{1,2}\+\d{1,2}=", p) for p in prompts)
    assert any("-" in o.task.make().prompt for o in top)


def test_without_curriculum_training_and_heldout_draw_the_top_level():
    """curriculum=false draws level 2 at once (also after restoring a level-0 state); held-out is always level 2."""
    on = make({"arithmetic": 1.0}, groups=1, window=4)
    off = make({"arithmetic": 1.0}, groups=1, window=4, curriculum=False)
    orders = [_next(off, (1.0, 1.0)) for _ in range(40)]
    assert {o.level for o in orders} == {2} and any("-" in o.task.make().prompt for o in orders)
    off.load_state_dict(json.loads(json.dumps(on.state_dict())))
    assert off.mix.curriculum.level("arithmetic") == 2 and _next(off).level == 2
    assert _next(on).level == 0
    heldout = [t.prompt for t in on.pool.heldout()]
    assert heldout == [t.prompt for t in off.pool.heldout()] and len(heldout) == 64
    assert any("-" in p for p in heldout) and any(re.search(r"\d\d", p) for p in heldout)


def test_a_replica_joining_takes_orders_by_load_per_throughput():
    """r1 generating 3x faster than r0 takes 6 of a batch's 8 equal groups."""
    s = make({"zsched/lite": 1.0}, groups=8)
    s.add_replica("r1", 3000.0)
    assert [o.replica for o in s.admit(0)] == ["r0", "r1", "r1", "r1", "r0", "r1", "r1", "r1"]


def test_a_replica_leaving_hands_its_groups_to_the_others():
    """Groups in flight on a replica that leaves come back re-placed; with no replica they wait for the next."""
    s = make({"zsched/lite": 1.0}, groups=8, replicas=("r0", "r1"))
    batch = s.admit(0)
    on_r1 = {o.id for o in batch if o.replica == "r1"}
    moved = s.lose("r1")
    assert {o.id for o in moved} == on_r1 == {1, 3, 5, 7} and {o.replica for o in moved} == {"r0"}
    assert {o.replica for o in s.placement.inflight.values()} == {"r0"}
    assert s.lose("r0") == [] and s.placement.inflight == {}
    assert s.admit(5) == []  # nothing starts without a replica
    back = s.add_replica("r2")
    assert sorted(o.id for o in back) == list(range(8)) and {o.replica for o in back} == {"r2"}
    for o in back:
        report(s, o)
    assert s.admit(1) == []  # batch 0 is complete and waits for the trainer (queue_size 1)
    s.consumed(0)
    assert [(o.batch, o.replica) for o in s.admit(1)] == [(1, "r2")] * 8


def test_sandbox_nodes_joining_and_leaving_change_dominant_shares():
    """Sandbox seconds are divided by all nodes' slots: a second 4-slot node halves box's share of them."""
    s = make({"zsched/lite": 1.0, "zsched/box": 1.0}, groups=10)
    counts = Counter(o.task.domain for o in drive(s, 21))
    n_lite, n_box = counts["zsched/lite"], counts["zsched/box"]
    assert abs(n_lite * 0.1 - n_box * 2.0) <= 2.0  # equal dominant shares at one node

    def box_share(slots):  # box: 8 s a group over `slots`; lite: 100 tokens a group over 1000 tokens/s
        return n_box * 8 / slots / (n_box * 8 / slots + n_lite * 0.1)

    assert s.mix.shares()[1]["zsched/box"] == pytest.approx(box_share(4), rel=1e-6)
    s.add_node("n1", 4)
    assert s.mix.shares()[1]["zsched/box"] == pytest.approx(box_share(8), rel=1e-6)
    assert Counter(o.task.domain for o in s.admit(s.admission.next_batch))["zsched/box"] >= 5  # box catches up
    s.remove_node("n1")
    s.remove_node("n0")  # no node: sandbox seconds over one slot
    assert s.mix.shares()[1]["zsched/box"] > box_share(4)


def _mixed(order):
    """Scores that depend on the domain and the task only through its domain (ids differ after a restore)."""
    return {"arithmetic": ((1.0, 1.0), (1.0, 0.5)), "zsched/box": ((0.0, 0.0), (0.0, 0.0))}.get(
        order.task.domain, SIGNAL)


def test_state_survives_a_json_round_trip():
    """A fresh scheduler loading state_dict() has the same weights, levels, pass rates and next picks."""
    mix = {"zsched/tok": 1.0, "zsched/lite": 1.3, "zsched/box": 0.7, "arithmetic": 1.1}
    cfg = dict(groups=5, window=6, promote_at=0.9, horizon=500, nodes=(("n0", 40),))
    s = make(mix, **cfg)
    drive(s, 12, _mixed)
    m = s.metrics()
    assert m["level"]["arithmetic"] >= 1 and m["weight"]["zsched/box"] == pytest.approx(0.7 * 0.1)
    state = json.loads(json.dumps(s.state_dict()))
    fresh = make(mix, **cfg)
    fresh.load_state_dict(state)
    restored = fresh.metrics()
    for key in ("weight", "level", "pass_rate", "signal", "share_target"):
        assert restored[key] == m[key], key
    assert restored["share"] == pytest.approx(m["share"], rel=1e-9)
    assert fresh.mix.cost == s.mix.cost
    assert [o.task.domain for o in drive(fresh, 20, _mixed)] == [o.task.domain for o in drive(s, 20, _mixed)]
    assert fresh.metrics()["weight"] == s.metrics()["weight"]


def test_node_policy_quotas_are_the_sandbox_domains_weight_shares():
    """Quotas over sandbox domains only, summing to 1, following adaptive weights; priorities only where set."""
    s = make({"zsched/box": 1.0, "zsched/box2": 3.0, "zsched/lite": 2.0}, groups=3, window=4,
             priorities={"zsched/box2": 2})
    policy = s.node_policy()
    assert policy.quotas == pytest.approx({"zsched/box": 0.25, "zsched/box2": 0.75})
    assert sum(policy.quotas.values()) == pytest.approx(1.0) and policy.priorities == {"zsched/box2": 2}
    drive(s, 8, lambda o: ((1.0, 1.0), (1.0, 1.0)) if o.task.domain == "zsched/box2" else SIGNAL)
    quotas = s.node_policy().quotas  # box2 solved: its weight 3 * 0.1
    assert quotas == pytest.approx({"zsched/box": 1 / 1.3, "zsched/box2": 0.3 / 1.3})
    assert sum(quotas.values()) == pytest.approx(1.0)
    assert make({"zsched/lite": 1.0}).node_policy().quotas == {}


def test_a_generator_draw_is_made_where_it_runs_the_same_every_time():
    """Orders carry a seed, not a task: made after a pickle round trip (as the worker does) it is the same training task."""
    import pickle

    from tempering.pool import is_heldout

    s = make({"arithmetic": 1.0}, groups=8, curriculum=False)
    for o in s.admit(0):
        assert o.task.task is None and o.task.level == 2
        task = pickle.loads(pickle.dumps(o.task)).make()
        assert task == o.task.make() and not is_heldout(task)


def test_a_domains_first_group_replaces_the_cost_prior_then_costs_average():
    """Prior 1 s of sandbox; the first group used 8 s: 8 at once (not 2.4); a later one of 3 s: 0.8*8 + 0.2*3 = 7."""
    s = make({"zsched/box": 1.0}, groups=1)
    assert s.mix.cost["zsched/box"][1] == 1.0
    report(s, s.admit(0)[0])
    assert s.mix.cost["zsched/box"] == [100.0, 8.0]
    s.consumed(0)
    s.complete(GroupReport(s.admit(1)[0].id, 100, 3.0, (1.0,), (1.0,)))
    assert s.mix.cost["zsched/box"][1] == pytest.approx(7.0)


def test_a_domain_has_one_group_in_flight_until_its_first_ends():
    """box's cost is a guess until its first group ends: while it runs, lite (learned) takes every group."""
    s = make({"zsched/box": 1.0, "zsched/lite": 1.0}, groups=2)
    first = {o.task.domain: o for o in s.admit(0)}
    assert set(first) == {"zsched/box", "zsched/lite"}
    report(s, first["zsched/lite"])  # lite's cost is now known; box's group still runs
    assert [o.task.domain for o in s.admit(1)] == ["zsched/lite", "zsched/lite"]
    report(s, first["zsched/box"])  # 8 s of sandbox over 4 slots: box now waits for lite to catch up
    assert "zsched/box" in s.mix._learned and s.mix._flying["zsched/box"] == 0
    s = make({"zsched/box": 1.0}, groups=3)  # alone: nothing else to order, so it goes anyway
    assert [o.task.domain for o in s.admit(0)] == ["zsched/box"] * 3


def test_a_replicas_measured_throughput_rescales_token_shares():
    """tok's 1000-token groups are 1 s of a 1000 tok/s replica; measured at 6000 (EMA: 2000) they are 0.5 s."""
    s = make({"zsched/tok": 1.0, "zsched/box": 1.0}, groups=2)
    drive(s, 1)
    before = s.mix._dominant("zsched/tok")
    s.measured("r0", 6000.0)
    assert s.placement.replicas["r0"] == pytest.approx(2000.0)
    assert s.mix._dominant("zsched/tok") == pytest.approx(before / 2)
    s.measured("gone", 5.0)  # a replica that left: ignored
    assert "gone" not in s.placement.replicas


UNIFORM = ((1.0, 1.0), (1.0, 1.0))  # every sample solved: no group-relative signal


def test_dynamic_sampling_redraws_groups_without_signal_up_to_the_cap():
    """Batch of 3 with a cap of 2: the first two uniform groups are each replaced by one new order
    of the same batch; the third uniform group takes its place (the cap is spent); the batch is
    complete exactly when its last order ends, and the next batch starts with a fresh cap."""
    s = GlobalScheduler(TasksConfig(weights={"zsched/lite": 1.0}, eval_per_domain=64), SchedulerConfig(horizon=10**9),
                        3, 0, 1, refills=2)
    s.add_replica("r0", 1000.0)
    a, b, c = s.admit(0)
    report(s, a, UNIFORM)
    (r1,) = s.admit(0)
    assert r1.batch == 0 and r1.id not in (a.id, b.id, c.id)
    report(s, b, ((1.0, 0.0), (0.5, 0.5)))  # rewards equal, outcomes not: still no signal
    (r2,) = s.admit(0)
    report(s, c, UNIFORM)  # cap spent: it keeps its place
    assert s.admit(0) == [] and s.admission.refilled(0) == 2
    report(s, r1, SIGNAL)
    assert not s.is_complete(0)
    report(s, r2, ((0.0,), (0.0,)))  # one scored sample has no signal either, but the cap is spent
    assert s.is_complete(0)
    s.consumed(0)
    assert s.admission.refilled(0) == 0
    first = s.admit(1)
    report(s, first[0], UNIFORM)
    assert [o.batch for o in s.admit(1)] == [1]


def test_without_dynamic_sampling_uniform_groups_fill_their_places():
    s = make({"zsched/lite": 1.0}, groups=2)
    for o in s.admit(0):
        report(s, o, UNIFORM)
    assert s.is_complete(0) and s.admit(0) == [] and s.admission.refilled(0) == 0


def test_dynamic_sampling_is_checked_at_load(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text("[buffer]\ndynamic_sampling = -1\n")
    with pytest.raises(ConfigError, match=r"buffer.dynamic_sampling: expected an integer >= 0, got -1"):
        load_config(path)
