"""What graders see of a cad/* sample: the design intent, and as the answer the submitted solid's
measurements and three silhouettes (short enough for a judge's prompt, quick to make); nothing
submitted says so. Every cad domain carries the design-intent rubric."""

import dataclasses
import pickle
import random

import pytest

from tempering.agent.format import tool_format
from tempering.reward.rubrics import get_rubric, messages
from tempering.verdict import VerifierContext
from tempering.rollout.episode import Episode, replay
from tempering.tasks import get_domain
from tempering.tasks.cad import geometry as g
from tempering.tasks.cad.domain import ALPHABET
from tempering.tasks.cad.grading import RUBRIC, built
from tempering.tasks.cad.parts import KINDS, part, target
from tempering.tasks.cad.scene import Scene
from tempering.tokenizer import char_tokenizer

TOK = char_tokenizer(ALPHABET)
NAMES = [f"cad/{k}" for k in KINDS]


def played(name: str, seed: int, turns=None):
    """A task of `name`, and the episode that played `turns` (default: the reference) on its scene."""
    task = dataclasses.replace(get_domain(name).make(random.Random(seed)), id=f"{name}-{seed}")
    fmt = tool_format("compact", TOK)
    ep = Episode(task, 0, TOK.encode_prompt(task.prompt), 8192, 32768, fmt.parse, fmt.renderer,
                 get_domain(name).open_host(task))
    replay(ep, task.reference_turns if turns is None else turns, TOK)
    return task, ep


def item_of(task, ep, workspace=...):
    ctx = VerifierContext(TOK, workspace=ep.host if workspace is ... else workspace)
    return get_domain(task.domain).grade_item(task, ep.trajectory(""), ctx)


def test_every_cad_domain_carries_the_design_intent_rubric():
    for name in NAMES:
        d = get_domain(name)
        assert d.rubric == RUBRIC and d.grade_item is not None
    assert get_rubric(RUBRIC).criteria == RUBRIC
    for word in ("dimensions", "holes", "slots", "bosses", "count", "material", "frame"):
        assert word in RUBRIC


@pytest.mark.parametrize("name", NAMES)
def test_the_reference_part_is_described_with_the_targets_measurements_and_views(name):
    for seed in (0, 1):
        task, ep = played(name, seed)
        kind, s = task.ref.split(":")
        p, (want, _) = part(kind, int(s)), target(kind, int(s))
        item = item_of(task, ep)
        assert item.prompt == task.prompt and item.reference is None and not item.transcript
        lo, hi = g.bounds(want)
        size = " x ".join(g.fmt(x) for x in hi - lo)
        extent = ", ".join(f"{a} {g.fmt(lo[i])}..{g.fmt(hi[i])}" for i, a in enumerate("xyz"))
        answer = item.answer
        assert f"size {size};" in answer and extent in answer, (size, answer[:300])
        assert f"through-holes (genus) {p.holes}" in answer and f"material {p.material}" in answer
        assert f"volume {g.fmt(g.volume(want))}" in answer and "separate pieces" not in answer
        for view in g.VIEWS:
            assert f"{view} view, 1 character = " in answer
        assert "#" in answer and len(answer) < 4000, len(answer)
        text = messages(get_rubric(RUBRIC), item)[1]["content"]
        assert task.prompt in text and answer in text


def test_the_silhouettes_show_the_holes():
    task, ep = played("cad/plate-holes", 0)
    top = item_of(task, ep).answer.split("top view")[1].split("front view")[0]
    rows = top.splitlines()[1:]
    inside = [r[:-1] for r in rows[1:-1]]  # the grid's margin cells are outside the part
    assert any("." in r for r in inside)  # the holes, inside the plate's outline


def test_nothing_submitted_says_so():
    task, ep = played("cad/plate-holes", 0, turns=[""])  # no call at all: an empty scene
    assert item_of(task, ep).answer == "nothing submitted: the scene is empty"
    assert item_of(task, ep, workspace=None).answer.startswith("nothing submitted")
    build = [t for t in task.reference_turns if not t.startswith("$submit")]
    task, ep = played("cad/plate-holes", 0, turns=build)
    answer = item_of(task, ep).answer
    assert answer.startswith("nothing submitted") and "plate" in answer and "view" not in answer


def test_solids_left_beside_the_part_and_a_pickled_scene():
    task, ep = played("cad/flange-holes", 3)
    scene = ep.host
    copy = pickle.loads(pickle.dumps(scene))  # as the reward's process pool receives it
    assert built(copy) == built(scene)
    extra = Scene()
    extra.run("box", "plate 40 30 5")
    extra.run("box", "spare 5 5 5")
    extra.run("submit", "plate")
    answer = built(extra)
    assert "not submitted: spare" in answer and "size 40 x 30 x 5" in answer


def test_a_huge_solid_still_fits():
    scene = Scene()
    scene.run("box", "slab 2000 1500 10")
    scene.run("scale", "slab 10")  # past the largest nice cell: a cell of its own
    scene.run("submit", "slab")
    answer = built(scene)
    assert "size 20000 x 15000 x 100" in answer and "1 character = 334 mm" in answer and len(answer) < 4000
