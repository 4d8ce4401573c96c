"""What reward models and judges see of a CAD sample, and the criteria a judge grades it by.

The exact verifier (`reward.verify`) compares the submitted solid with the hidden target; a
grader instead reads the design intent and what was built. `grade_item` gives it the task's
prompt (the intent and the frame) and, as the answer, the submitted solid's measurements (what
`measure` says: size, extent in the frame, volume, through-holes, pieces, material) and its
silhouettes from the top, the front and the side, all three drawn at one cell size chosen so the
whole stays under about 4,000 characters. Nothing submitted says so, and nothing else.

It runs in the reward service's own process on the episode's final `Scene` (`ctx.workspace`),
in milliseconds (three rasters of one solid); it never builds the target, so a grader learns
nothing of the part that the prompt does not say. `RUBRIC` is the `cad/*` domains' criteria for
judges whose rubric is "domain".
"""

from __future__ import annotations

import math

from manifold3d import Manifold

from tempering.records import Task, Trajectory
from tempering.verdict import JudgeItem, VerifierContext, task_text
from tempering.tasks.cad import geometry as g
from tempering.tasks.cad.scene import Scene

GRID_CHARS = 3000  # the three silhouettes together, in characters
MAX_SIDE = 60  # characters on a silhouette's side (geometry.render's limit)
NOTHING = "nothing submitted"

RUBRIC = (
    "The task states a part's design intent: its overall dimensions, its features (holes, slots, pockets, "
    "bosses, counterbores, patterns of them) with their sizes, counts, spacing and placement, its material, "
    "and the coordinate frame it sits in. The answer describes what the agent built and submitted: the solid's "
    "measurements (size, extent along x, y and z, volume, through-holes as its genus, separate pieces, "
    "material) and its silhouettes seen from the top, the front and the side ('#' solid, '.' empty, one "
    "character per cell of the stated size). Grade how well the built part matches the intent:\n"
    "- Overall dimensions: the size and extent match the stated length, width, height or thickness "
    "(diameter for round parts), placed as the frame says (which corner or axis at the origin, which way it "
    "extends).\n"
    "- Features: every named feature is there, in the right count (the genus counts through-holes), size, "
    "spacing and place (insets from edges, centred, on the stated circle), and nothing that was not asked for.\n"
    "- Material: the stated material.\n"
    "- One part: a single piece unless the intent says otherwise.\n"
    "A silhouette is coarse: a feature smaller than a cell may not show, while the genus and the volume still "
    "tell whether holes were cut. Judge from the measurements and silhouettes given, not from what the agent "
    "may have meant.\n"
    "10: matches the intent on every point. 7-9: every feature present and counted right, one size or place "
    "slightly off. 4-6: the overall shape right, but a feature missing, miscounted or misplaced, or the wrong "
    "material. 1-3: little more than the stock shape. 0: nothing submitted, or a shape unrelated to the intent.")


def grade_item(task: Task, sample: Trajectory, ctx: VerifierContext) -> JudgeItem:
    """The design intent as the task states it, and what was built as the answer."""
    return JudgeItem(task_text(task), built(ctx.workspace))


def built(scene: object) -> str:
    """The submitted solid described for a grader, or why there is none."""
    if not isinstance(scene, Scene) or scene.submitted is None:
        if isinstance(scene, Scene) and scene.solids:
            return f"{NOTHING}: the episode ended without submit (the scene holds {', '.join(scene.solids)})"
        return f"{NOTHING}: the scene is empty"
    name = scene.submitted
    solid = scene.solids.get(name)
    if solid is None or solid.is_empty():
        return f"{NOTHING}: the submitted solid {name} is empty"
    lines = [f"The submitted part (units are mm). {scene.describe(name)}"]
    others = [n for n in scene.solids if n != name]
    if others:  # left in the scene: not part of what is graded
        lines.append(f"Also in the scene but not submitted: {', '.join(others)}.")
    cell = cell_size(solid)
    lines += [g.render(solid, view, cell, max_cells=MAX_SIDE) for view in g.VIEWS]
    return "\n".join(lines)


def cell_size(solid: Manifold) -> float:
    """The finest of geometry's cell sizes at which the three silhouettes fit `GRID_CHARS` and
    `MAX_SIDE` (one scale for all three, so they can be read together)."""
    lo, hi = g.bounds(solid)
    ext = dict(zip("xyz", hi - lo))

    def chars(cell: float) -> tuple[int, int]:
        side = {a: max(1, math.ceil((e - 1e-9) / cell)) for a, e in ext.items()}
        total = sum(side[v] * (side[u] + 1) for u, v in g.VIEW_AXES.values())
        return total, max(side.values())

    for cell in g.NICE_CELLS:
        total, longest = chars(cell)
        if total <= GRID_CHARS and longest <= MAX_SIDE:
            return cell
    return math.ceil(max(ext.values()) / MAX_SIDE)  # beyond the largest nice cell: a part no intent asks for
