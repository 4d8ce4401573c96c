"""A small report built on geometry."""

from geometry import circleArea, distanceBetween, rectPerimeter


def summary(points):
    """Total path length through points, and the area of a circle of that length as radius."""
    length = sum(distanceBetween(a, b) for a, b in zip(points, points[1:]))
    return {"length": round(length, 3), "area": round(circleArea(length), 3),
            "box": rectPerimeter(3, 4)}
