"""The cad/* domains end to end: registered, seeded, the target hidden from the prompt, and every
part kind's oracle (replayed as compact tool calls) scoring 1 through the real RewardService, whose
heavy verifier runs in a spawned process that receives the scene pickled; a no-op, a part
without its holes, a misplaced hole and a wrong material scoring 0."""

import dataclasses
import math
import random
import re

import pytest

from tempering.agent.format import tool_format
from tempering.config import RewardConfig
from tempering.records import Task
from tempering.reward import RewardService, Submission
from tempering.rollout.episode import Episode, replay
from tempering.tasks import domains, get_domain
from tempering.tasks.cad import geometry as g
from tempering.tasks.cad.domain import ALPHABET
from tempering.tasks.cad.parts import KINDS, part, target
from tempering.tokenizer import char_tokenizer

TOK = char_tokenizer(ALPHABET)
NAMES = [f"cad/{k}" for k in KINDS]
NUMBER = re.compile(r"\d+(?:\.\d+)?")


def task_of(name: str, seed: int = 0) -> Task:
    return dataclasses.replace(get_domain(name).make(random.Random(seed)), id=f"{name}-{seed}")


def play(task: Task, turns) -> Episode:
    fmt = tool_format("compact", TOK)
    ep = Episode(task, 0, TOK.encode_prompt(task.prompt), 8192, 32768, fmt.parse, fmt.renderer,
                 get_domain(task.domain).open_host(task))
    return replay(ep, turns, TOK)


@pytest.fixture(scope="module")
def service():
    svc = RewardService(RewardConfig(workers=2, timeout_s=60), TOK)
    yield svc
    svc.close()


def score(service, episodes):
    rewards = service.score([Submission(ep.task, ep.trajectory(""), ep.host) for ep in episodes])
    assert not any(r.failed for r in rewards), [r.reason for r in rewards]
    return rewards


def test_every_kind_is_a_registered_heavy_domain_with_its_own_scene_and_tools():
    cad = {n: d for n, d in domains().items() if n.startswith("cad/")}
    assert sorted(cad) == sorted(NAMES) and len(cad) >= 4
    for d in cad.values():
        assert d.heavy and d.open_host is not None and d.family == "cad" and not d.sandbox
        assert d.tools["submit"].ends_episode and {"box", "cylinder", "difference", "render"} <= set(d.tools)


@pytest.mark.parametrize("name", NAMES)
def test_tasks_are_seeded_and_carry_the_part_by_reference(name):
    a, b = task_of(name, 7), task_of(name, 7)
    assert a == b and a != task_of(name, 8)
    kind, seed = a.ref.split(":")
    assert f"cad/{kind}" == name and part(kind, int(seed)).prompt == a.prompt
    assert set(a.tools) == set(get_domain(name).tools) and a.answer == ""


@pytest.mark.parametrize("name", NAMES)
def test_the_prompt_states_the_design_intent_and_nothing_of_the_target(name):
    """Every number in the prompt is a stated dimension of the intent (sizes, counts, spacings, insets,
    the frame's 0); the program, the coordinates a model must work out and the mesh are not there."""
    d, rng = get_domain(name), random.Random(1)
    derived = 0
    for _ in range(40):
        t = d.generate(rng)
        kind, seed = t.ref.split(":")
        p = part(kind, int(seed))
        said = {float(x) for x in NUMBER.findall(t.prompt)}
        assert said <= set(p.stated), (t.prompt, said - set(p.stated))
        assert "$" not in t.prompt and t.ref not in t.prompt and seed not in t.prompt
        assert not any(line in t.prompt for line in p.program)
        program_numbers = {float(x) for line in p.program for x in NUMBER.findall(line)}
        derived += bool(program_numbers - said)  # positions the model has to work out
    assert derived == 40


@pytest.mark.parametrize("kind", KINDS)
def test_the_targets_genus_is_the_number_of_holes_built(kind):
    for seed in range(6):
        p = part(kind, seed)
        want, stock = target(kind, seed)
        assert g.genus(want) == p.holes and g.genus(stock) == 0, (p.intent, p.program)
        assert len(want.decompose()) == 1 and 0 < g.volume(want) < g.volume(stock)


def test_a_corner_holed_plate_has_the_volume_worked_out_by_hand():
    seed = next(s for s in range(100) if "four" in part("plate-holes", s).intent)
    p = part("plate-holes", seed)
    L, W, T, d, e = p.stated
    hole = g.SEGMENTS / 2 * (d / 2) ** 2 * math.sin(2 * math.pi / g.SEGMENTS)
    want, _ = target("plate-holes", seed)
    assert g.volume(want) == pytest.approx(L * W * T - 4 * hole * T, rel=1e-9)
    assert g.bounds(want)[1].tolist() == [L, W, T]


def test_oracles_score_one_and_no_ops_and_parts_without_holes_score_zero(service):
    oracles, stocks, noops, empties = [], [], [], []
    for name in NAMES:
        task = task_of(name)
        p = part(*task.ref.split(":")[:1], int(task.ref.split(":")[1]))
        ep = play(task, task.reference_turns)
        assert ep.finish_reason == "stop" and ep.host.submitted == p.name
        assert not any(c.error for c in ep.trajectory("").tool_calls)
        oracles.append(ep)
        stocks.append(play(task, [f"${line}" for line in p.stock_program] + [f"$submit {p.name}"]))
        noops.append(play(task, ["Done."]))  # answers without building or submitting anything
        empties.append(play(task, ["$submit", "$box a 1 1 1", "$difference a a a", "$box b 1 1 1",
                                   "$difference a b a", "$submit a"]))  # nothing there, then an empty solid
    rewards = score(service, oracles + stocks + noops + empties)
    n = len(NAMES)
    for name, r in zip(NAMES, rewards[:n]):
        c = r.components
        assert c["outcome"] == 1.0 and c["partial"] == pytest.approx(1.0), (name, r.reason, c)
        assert all(c[k] == pytest.approx(1.0) for k in ("iou", "features", "bbox", "genus", "views", "material"))
        assert r.reason == "the part matches" and r.total >= 1.5  # outcome 1 + 0.5 x partial by default
    for name, r in zip(NAMES, rewards[n:2 * n]):
        c = r.components
        assert c["outcome"] == 0.0 and c["partial"] < 0.25 and c["features"] == 0.0, (name, c)
        assert c["material"] == 1.0 and "holes and cut-outs IoU 0.000" in r.reason
    for r in rewards[2 * n:3 * n]:
        assert r.components["outcome"] == 0.0 and r.components["partial"] == 0.0 and r.reason == "nothing submitted"
    for r in rewards[3 * n:]:
        assert r.components["outcome"] == 0.0 and r.components["iou"] == 0.0 and "empty" in r.reason


def test_a_hole_a_millimetre_off_or_the_wrong_material_is_not_the_part(service):
    def big(p):  # four small holes in a large plate: moving them is under 1% of its volume
        L, W, T, d, e = p.stated
        return "four" in p.intent and d <= 4 and L * W >= 3600

    seed = next(s for s in range(1000) if big(part("plate-holes", s)))
    task = dataclasses.replace(task_of("cad/plate-holes"), ref=f"plate-holes:{seed}", id="moved")
    p = part("plate-holes", seed)
    program = [f"${line}" for line in p.program]
    moved = [*program[:4], "$move hole 1 0 0", *program[4:], f"$submit {p.name}"]
    material = "steel" if p.material != "steel" else "brass"
    wrong = [*program[:-1], f"$material {p.name} {material}", f"$submit {p.name}"]
    (off, metal) = score(service, [play(task, moved), play(task, wrong)])
    assert off.components["iou"] > 0.99 and off.components["outcome"] == 0.0  # IoU alone would pass it
    assert off.components["features"] < 0.9 and off.components["genus"] == 1.0
    assert off.reason.startswith("not the part: holes and cut-outs IoU 0.")
    assert metal.components["iou"] == pytest.approx(1.0) and metal.components["outcome"] == 0.0
    assert metal.reason == f"not the part: material {material}, not {p.material}"
    assert 0.8 < metal.components["partial"] < 0.9
