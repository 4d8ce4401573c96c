"""Plane geometry helpers."""

import math


def circleArea(r):
    if r < 0:
        raise ValueError("negative radius")
    return math.pi * r * r


def rectPerimeter(w, h):
    return 2 * (w + h)


def distanceBetween(p, q):
    return math.hypot(q[0] - p[0], q[1] - p[1])
