"""The modelling tools as the model calls them: compact and JSON calls, the error messages it reads
for bad calls (which change nothing), and a scene that pickles as its construction log."""

import math
import pickle
import random

import pytest

from tempering.agent.parsers import compact
from tempering.agent.tools import ends_episode, execute
from tempering.records import ToolCall
from tempering.tasks import get_domain
from tempering.tasks.cad import geometry as g
from tempering.tasks.cad.scene import Scene

DOMAIN = get_domain("cad/plate-holes")
TASK = DOMAIN.make(random.Random(0))


def call(scene: Scene, text: str) -> ToolCall:
    (parsed,) = compact(text)
    return execute(parsed, TASK, scene, 0)


def plate() -> Scene:
    scene = DOMAIN.open_host(TASK)
    for line in ("$box plate 40 30 5", "$cylinder hole 4 7", "$move hole 5 5 -1", "$pattern hole 2 2 30 20",
                 "$difference plate plate hole", "$material plate aluminium"):
        result = call(scene, line)
        assert not result.error, (line, result.error)
    return scene


def test_compact_calls_read_naturally_and_json_calls_name_their_argument_line():
    scene = DOMAIN.open_host(TASK)
    assert call(scene, "$box plate 40 30 5").output == "plate: box 40 x 30 x 5; x 0..40, y 0..30, z 0..5; volume 6000"
    out = execute(ToolCall("cylinder", {"args": "hole 4 7"}), TASK, scene, 1).output  # as hermes JSON gives it
    assert out.startswith("hole: cylinder 4 across, 7 tall; x -2..2, y -2..2, z 0..7")
    assert call(scene, "$difference plate plate hole").output.startswith("plate: plate - hole; x 0..40")
    assert list(scene.solids) == ["plate"]  # the operands were used up


def test_a_built_plate_measures_as_designed():
    scene = plate()
    out = call(scene, "$measure plate").output
    holes = 4 * g.SEGMENTS / 2 * 2**2 * math.sin(2 * math.pi / g.SEGMENTS) * 5  # four 48-gons of radius 2, 5 deep
    assert out.startswith(f"plate: size 40 x 30 x 5; x 0..40, y 0..30, z 0..5; volume {g.fmt(6000 - holes)};")
    assert out.endswith("through-holes (genus) 4; material aluminium")
    assert call(scene, "$render top plate 5").output == "\n".join([
        "plate, top view, 1 character = 5 mm: x 0..40 left to right, y 30..0 top to bottom",
        "########", "########", "########", "########", "########", "########"])  # 4 mm holes fall between centres
    # 1 mm cells: the row of centres at y = 24.5 crosses the holes at y = 25 where x is within 1.94 of 5 and 35
    assert call(scene, "$render top plate 1").output.splitlines()[6] == "###....##########################....###"


@pytest.mark.parametrize("text, kind, message", [
    ("$box plate 40 30", "tool", "box takes NAME SX SY SZ, got 3 arguments: plate 40 30"),
    ("$box plate 40 x 5", "tool", "box: SY must be a number, got 'x'"),
    ("$box plate 40 -30 5", "tool", "box: SY must be more than 0, got -30"),
    ("$box 2d 1 1 1", "tool", "box: '2d' is not a usable name"),
    ("$cylinder hole 4 nan", "tool", "cylinder: H must be a number, got 'nan'"),
    ("$move bolt 1 2 3", "tool", "no solid named 'bolt' (the solids: plate)"),
    ("$rotate plate q 90", "tool", "rotate: AXIS must be x, y or z, got 'q'"),
    ("$difference plate plate", "tool", "difference takes NEW A B [C ...]: the result's name, then two solids"),
    ("$union plate plate plate", "tool", "union: each solid may appear once"),
    ("$pattern plate 9 9 1 1", "tool", "pattern: at most 64 copies, asked for 81"),
    ("$pattern plate 2.5 1 1 1", "tool", "pattern: NX must be a whole number of at least 1, got '2.5'"),
    ("$material plate wood", "tool", "material: unknown material 'wood' (known: aluminium, steel"),
    ("$render iso", "tool", "render takes VIEW [NAME] [CELL_MM]: VIEW is top, front or side"),
    ("$render top plate 0.01", "tool", "use a cell of at least 0.667 mm"),
    ("$submit bolt", "tool", "no solid named 'bolt'"),
    ("$extrude plate 5", "unknown_tool", "unknown tool 'extrude'"),
])
def test_bad_calls_say_what_to_fix_and_change_nothing(text, kind, message):
    scene = plate()
    before = (list(scene.log), dict(scene.solids), dict(scene.materials))
    result = call(scene, text)
    assert result.error_kind == kind and message in result.error, result.error
    assert (scene.log, scene.solids, scene.materials) == before and scene.submitted is None
    assert not ends_episode(result, TASK)


def test_a_json_call_without_its_argument_line_is_a_bad_call():
    result = execute(ToolCall("box", {}), TASK, Scene(), 0)
    assert result.error_kind == "bad_arguments" and result.error == "box needs args"


def test_submit_names_the_part_and_ends_the_episode():
    scene = plate()
    result = call(scene, "$submit plate")
    assert result.output == "submitted plate" and scene.submitted == "plate" and ends_episode(result, TASK)
    after = call(scene, "$move plate 1 0 0")  # a later call of the same turn (JSON calls come several a turn)
    assert after.error == "plate is submitted: the scene can no longer change"
    assert call(scene, "$measure plate").output.startswith("plate: size 40 x 30 x 5; x 0..40")
    lone = Scene()
    call(lone, "$box b 1 1 1")
    assert call(lone, "$submit").output == "submitted b"  # the only solid needs no name
    empty = call(Scene(), "$submit")
    assert "submit takes the NAME of the finished part (the solids: none yet)" in empty.error


def test_booleans_keep_the_material_transforms_keep_it_new_solids_have_none():
    scene = plate()
    call(scene, "$box tab 5 5 5")
    call(scene, "$union part tab plate")
    assert scene.materials == {"part": "aluminium"}
    call(scene, "$move part 1 0 0")
    assert scene.materials == {"part": "aluminium"}
    call(scene, "$box part 1 1 1")  # a new solid under the name
    assert scene.materials == {}


def test_a_scene_pickles_as_its_log_and_comes_back_whole():
    scene = plate()
    call(scene, "$rotate plate z 90")
    call(scene, "$polar plate 2")
    call(scene, "$submit plate")
    state = scene.__getstate__()
    assert set(state) == {"log", "submitted"} and state["log"][0] == "box plate 40 30 5"
    back = pickle.loads(pickle.dumps(scene))
    assert back.submitted == "plate" and back.materials == scene.materials
    assert g.iou(back.solid("plate"), scene.solid("plate")) == pytest.approx(1.0, abs=1e-12)
