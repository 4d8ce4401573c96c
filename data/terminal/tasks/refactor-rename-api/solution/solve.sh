#!/bin/bash
cat > /app/geometry.py <<'EOF'
"""Plane geometry helpers."""

import functools
import math
import warnings


def circle_area(r):
    if r < 0:
        raise ValueError("negative radius")
    return math.pi * r * r


def rect_perimeter(w, h):
    return 2 * (w + h)


def distance_between(p, q):
    return math.hypot(q[0] - p[0], q[1] - p[1])


def _deprecated(old, new):
    @functools.wraps(new)
    def alias(*args, **kwargs):
        warnings.warn(f"{old} is deprecated; use {new.__name__}", DeprecationWarning, stacklevel=2)
        return new(*args, **kwargs)
    alias.__name__ = old
    return alias


circleArea = _deprecated("circleArea", circle_area)
rectPerimeter = _deprecated("rectPerimeter", rect_perimeter)
distanceBetween = _deprecated("distanceBetween", distance_between)
EOF
cat > /app/report.py <<'EOF'
"""A small report built on geometry."""

from geometry import circle_area, distance_between, rect_perimeter


def summary(points):
    """Total path length through points, and the area of a circle of that length as radius."""
    length = sum(distance_between(a, b) for a, b in zip(points, points[1:]))
    return {"length": round(length, 3), "area": round(circle_area(length), 3),
            "box": rect_perimeter(3, 4)}
EOF
