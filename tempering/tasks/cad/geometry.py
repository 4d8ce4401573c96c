"""Solid geometry for the CAD domains: primitives, measures, the exact comparisons the reward uses,
and ASCII silhouettes. Pure functions of manifold3d `Manifold`s (exact mesh booleans).

Every primitive is built here, so a part's target and the model's solids are tessellated alike:
cylinders and spheres have `SEGMENTS` sides whatever their size, with a vertex on +x. Views are
projections onto a plane: `top` (x right, y up), `front` (x right, z up: seen from -y) and
`side` (y right, z up: seen from +x); a silhouette shows through-holes in the view along them.
"""

from __future__ import annotations

import math
from typing import Iterable

import numpy as np
from manifold3d import CrossSection, Manifold, OpType

SEGMENTS = 48  # sides of every cylinder and sphere

# Each view as the 3x4 rotation that carries its (right, up) axes onto (x, y): project() drops z.
VIEWS: dict[str, list[list[float]]] = {
    "top": [[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0]],
    "front": [[1, 0, 0, 0], [0, 0, 1, 0], [0, -1, 0, 0]],
    "side": [[0, 1, 0, 0], [0, 0, 1, 0], [1, 0, 0, 0]],
}
VIEW_AXES = {"top": ("x", "y"), "front": ("x", "z"), "side": ("y", "z")}


def box(sx: float, sy: float, sz: float) -> Manifold:
    """A box from the origin to (sx, sy, sz)."""
    return Manifold.cube([sx, sy, sz])


def cylinder(diameter: float, height: float) -> Manifold:
    """A cylinder along +z whose bottom face is centred on the origin."""
    return Manifold.cylinder(height, diameter / 2, -1.0, SEGMENTS)


def sphere(diameter: float) -> Manifold:
    return Manifold.sphere(diameter / 2, SEGMENTS)


def union(solids: Iterable[Manifold]) -> Manifold:
    solids = list(solids)
    return Manifold.batch_boolean(solids, OpType.Add) if solids else Manifold()


def volume(m: Manifold) -> float:
    return 0.0 if m.is_empty() else float(m.volume())


def bounds(m: Manifold) -> tuple[np.ndarray, np.ndarray] | None:
    """(min corner, max corner), or None for an empty solid."""
    if m.is_empty():
        return None
    b = m.bounding_box()
    return np.array(b[:3], dtype=float), np.array(b[3:], dtype=float)


def genus(m: Manifold) -> int:
    """The number of through-holes (handles) of a connected solid, from its mesh's Euler
    characteristic (for several pieces: sum of their genera - pieces + 1); 0 for nothing."""
    return 0 if m.is_empty() else int(m.genus())


def iou(a: Manifold, b: Manifold) -> float:
    """Exact volumetric intersection over union."""
    both = volume(a + b)
    return volume(a ^ b) / both if both > 0 else 0.0


def box_iou(a: Manifold, b: Manifold) -> float:
    """Volumetric IoU of the two axis-aligned bounding boxes (flat boxes compare by area)."""
    ba, bb = bounds(a), bounds(b)
    if ba is None or bb is None:
        return 0.0
    lo, hi = np.maximum(ba[0], bb[0]), np.minimum(ba[1], bb[1])
    if np.any(hi < lo):
        return 0.0
    size_a, size_b, inter = ba[1] - ba[0], bb[1] - bb[0], hi - lo
    keep = (size_a > 0) | (size_b > 0)  # a dimension both lack does not count
    i, va, vb = (float(np.prod(x[keep])) for x in (inter, size_a, size_b))
    return i / (va + vb - i) if va + vb - i > 0 else 0.0


def silhouette(m: Manifold, view: str) -> CrossSection:
    """The solid's outline seen from `view`, in that view's (right, up) coordinates."""
    return m.transform(VIEWS[view]).project()


def view_iou(a: Manifold, b: Manifold, view: str) -> float:
    """Exact area intersection over union of the two silhouettes from `view`."""
    sa, sb = silhouette(a, view), silhouette(b, view)
    both = (sa + sb).area()
    return (sa ^ sb).area() / both if both > 0 else 0.0


def raster(section: CrossSection, u0: float, v0: float, cell: float, cols: int, rows: int) -> np.ndarray:
    """Which cells of a grid (lower-left corner (u0, v0), square cells) have their centre inside
    the section; row 0 is the top row (highest v). Even-odd over the section's contours."""
    u = u0 + (np.arange(cols) + 0.5) * cell
    v = v0 + (np.arange(rows)[::-1] + 0.5) * cell
    pu, pv = np.meshgrid(u, v)
    inside = np.zeros(pu.shape, dtype=bool)
    for poly in section.to_polygons():
        p = np.asarray(poly, dtype=float)
        q = np.roll(p, -1, axis=0)
        for (x1, y1), (x2, y2) in zip(p, q):
            if y1 == y2:
                continue
            crosses = (y1 > pv) != (y2 > pv)
            x_at = x1 + (pv - y1) * (x2 - x1) / (y2 - y1)
            inside ^= crosses & (pu < x_at)
    return inside


NICE_CELLS = (0.1, 0.2, 0.25, 0.5, 1, 2, 2.5, 5, 10, 20, 25, 50, 100)


def render(m: Manifold, view: str, cell: float | None = None, default_cells: int = 24,
           max_cells: int = 60) -> str:
    """An ASCII silhouette of `m` from `view`: '#' where the solid is, '.' where it is not,
    one square cell of `cell` mm per character (default: the smallest of `NICE_CELLS` that fits
    the longer side in `default_cells`), the grid starting at the solid's lower-left corner in
    the view. Raises ValueError when the grid would exceed `max_cells` on a side."""
    if m.is_empty():
        return f"{view} view: empty"
    section = silhouette(m, view)
    lo, hi = bounds(m)
    axes = VIEW_AXES[view]
    (iu, iv) = ("xyz".index(a) for a in axes)
    u0, v0, u1, v1 = lo[iu], lo[iv], hi[iu], hi[iv]
    longest = max(u1 - u0, v1 - v0)
    if cell is None:
        cell = next((c for c in NICE_CELLS if longest / c <= default_cells + 1e-9), NICE_CELLS[-1])
    cols, rows = (max(1, math.ceil((x - 1e-9) / cell)) for x in (u1 - u0, v1 - v0))
    if max(cols, rows) > max_cells:
        raise ValueError(f"a {fmt(cell)} mm cell needs {max(cols, rows)} characters on a side, more than "
                         f"{max_cells}; use a cell of at least {fmt(longest / max_cells)} mm")
    grid = raster(section, u0, v0, cell, cols, rows)
    head = (f"{view} view, 1 character = {fmt(cell)} mm: {axes[0]} {fmt(u0)}..{fmt(u0 + cols * cell)} left to "
            f"right, {axes[1]} {fmt(v0 + rows * cell)}..{fmt(v0)} top to bottom")
    return head + "\n" + "\n".join("".join("#" if c else "." for c in row) for row in grid)


def fmt(x: float) -> str:
    """A length as people write it: at most 3 decimals, no trailing zeros, no -0."""
    s = f"{x:.3f}".rstrip("0").rstrip(".")
    return "0" if s in ("-0", "") else s
