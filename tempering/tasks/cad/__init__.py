"""3D modelling: seeded parts (plates and blocks with holes, bosses, slots, pockets, patterns)
described as design intent, built with modelling tools on a per-episode scene of named solids,
and graded by exact volumetric IoU against the hidden target (manifold3d), with bounding-box,
genus, silhouette and material components. `geometry` (primitives, measures, comparisons, ASCII
silhouettes), `scene` (the scene and its tools), `parts` (the part generators), `reward` (the
verifier), `grading` (what reward models and judges see of a sample, and the judges' design-intent
criteria), `domain` (the `cad/<kind>` domains, offered as `DOMAINS`)."""

from tempering.tasks.cad.domain import DOMAINS

__all__ = ["DOMAINS"]
