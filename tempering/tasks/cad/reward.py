"""The CAD verifier: the submitted solid against the part's target, exactly.

Components, each in [0, 1]:
- `iou`: exact volumetric intersection over union, vol(A & B) / vol(A | B), by manifold3d booleans.
- `features`: the same IoU of what was cut away from the part's stock (the part before its holes,
  slots and pockets): stock - target against stock - submission. A plate without its holes has
  none of that (0), a hole 1 mm off its place keeps about 0.85 of it, while its overall IoU would
  still be above 0.99: small features are a small share of the volume, so IoU alone barely sees them.
- `bbox`: IoU of the two axis-aligned bounding boxes.
- `genus`: 1 when the solid has the target's number of through-holes (the genus, from the mesh's
  Euler characteristic), else 0.
- `views`: the mean exact area IoU of the two silhouettes from the top, the front and the side.
- `material`: 1 when the submitted solid has the part's material, else 0.
- `partial`: the shaped score, sharpened so that a part missing its holes scores low:
  iou^4 x (0.2 + 0.8 features) x (1 if genus else 0.5) x (0.5 + 0.5 mean(bbox, views, material)).
- `outcome`: 1 when the part is right: iou >= 0.99, features >= 0.9, the genus and the material
  right; else 0. It is the accuracy.

Nothing submitted (the episode ended without `submit`, or nothing was built) scores 0 on all.
Runs in a process of its own (`heavy`): the scene arrives pickled as its construction log.
"""

from __future__ import annotations

from manifold3d import Manifold

from tempering.records import Task, Trajectory
from tempering.verdict import Verdict, VerifierContext
from tempering.tasks.cad import geometry as g
from tempering.tasks.cad.parts import part, target
from tempering.tasks.cad.scene import Scene

IOU_RIGHT, FEATURES_RIGHT = 0.99, 0.9
SHARPEN = 4  # the power of iou in `partial`
COMPONENTS = ("outcome", "partial", "iou", "features", "bbox", "genus", "views", "material")


def parse_ref(task: Task) -> tuple[str, int]:
    """(part kind, seed) of a task: its `ref` is "KIND:SEED"."""
    kind, _, seed = task.ref.partition(":")
    return kind, int(seed)


def compare(solid: Manifold, material: str | None, want: Manifold, stock: Manifold,
            want_material: str) -> dict[str, float]:
    """The components (without `partial` and `outcome`) of `solid` against the target `want`."""
    if solid.is_empty():
        return {k: 0.0 for k in COMPONENTS[2:]}
    cut_want, cut_got = stock - want, stock - solid
    features = 1.0 if g.volume(cut_want) == 0 and g.volume(cut_got) == 0 else g.iou(cut_want, cut_got)
    return {
        "iou": g.iou(solid, want),
        "features": features,
        "bbox": g.box_iou(solid, want),
        "genus": float(g.genus(solid) == g.genus(want)),
        "views": sum(g.view_iou(solid, want, v) for v in g.VIEWS) / len(g.VIEWS),
        "material": float(material == want_material),
    }


def score(c: dict[str, float]) -> dict[str, float]:
    """`partial` and `outcome` from the other components."""
    partial = (c["iou"] ** SHARPEN * (0.2 + 0.8 * c["features"]) * (1.0 if c["genus"] else 0.5)
               * (0.5 + 0.5 * (c["bbox"] + c["views"] + c["material"]) / 3))
    right = (c["iou"] >= IOU_RIGHT and c["features"] >= FEATURES_RIGHT and c["genus"] == 1.0
             and c["material"] == 1.0)
    return {"outcome": float(right), "partial": partial, **c}


def verify(task: Task, sample: Trajectory, ctx: VerifierContext) -> Verdict:
    zero = {k: 0.0 for k in COMPONENTS}
    scene = ctx.workspace
    if not isinstance(scene, Scene) or scene.submitted is None:
        return Verdict(zero, "nothing submitted")
    kind, seed = parse_ref(task)
    p = part(kind, seed)
    want, stock = target(kind, seed)
    solid = scene.solids.get(scene.submitted)
    if solid is None or solid.is_empty():
        return Verdict(zero, f"the submitted solid {scene.submitted!r} is empty")
    material = scene.materials.get(scene.submitted)
    c = score(compare(solid, material, want, stock, p.material))
    if c["outcome"]:
        return Verdict(c, "the part matches")
    wrong = [f"shape IoU {c['iou']:.3f}" if c["iou"] < IOU_RIGHT else "",
             f"holes and cut-outs IoU {c['features']:.3f}" if c["features"] < FEATURES_RIGHT else "",
             f"{g.genus(solid)} through-holes, not {g.genus(want)}" if not c["genus"] else "",
             f"material {material or 'none'}, not {p.material}" if not c["material"] else ""]
    return Verdict(c, "not the part: " + ", ".join(w for w in wrong if w))
