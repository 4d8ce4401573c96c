"""The CAD reward's measures on shapes whose answers are known by hand: exact IoU, genus, bounding
boxes, silhouettes, and the ASCII render of a small part cell by cell."""

import math

import pytest

from tempering.tasks.cad import geometry as g


def polygon_area(d: float) -> float:
    """The area of the SEGMENTS-gon that stands for a circle of diameter d."""
    n = g.SEGMENTS
    return n / 2 * (d / 2) ** 2 * math.sin(2 * math.pi / n)


def test_a_cube_against_itself_and_a_copy_of_it():
    cube = g.box(10, 10, 10)
    assert g.iou(cube, cube) == pytest.approx(1.0, abs=1e-12)
    assert g.iou(cube, g.box(10, 10, 10)) == pytest.approx(1.0, abs=1e-12)
    assert g.iou(cube, cube.translate([5, 0, 0])) == pytest.approx(500 / 1500)  # half overlaps
    assert g.iou(cube, cube.translate([20, 0, 0])) == 0.0
    assert g.iou(cube, g.box(1, 1, 1).translate([100, 0, 0]) - g.box(1, 1, 1).translate([100, 0, 0])) == 0.0


def test_a_cube_against_the_cube_with_a_through_hole_loses_the_holes_share():
    cube = g.box(10, 10, 10)
    square = cube - g.box(2, 3, 12).translate([4, 4, -1])  # a 2 x 3 mm square hole through it
    assert g.volume(square) == pytest.approx(1000 - 60)
    assert g.iou(cube, square) == pytest.approx(1 - 60 / 1000)  # intersection = the holed cube, union = the cube
    round_ = cube - g.cylinder(4, 12).translate([5, 5, -1])
    hole = polygon_area(4) * 10
    assert g.iou(round_, cube) == pytest.approx(1 - hole / 1000, rel=1e-9)
    assert g.iou(round_, square) == pytest.approx(g.volume(round_ ^ square) / g.volume(round_ + square))


@pytest.mark.parametrize("n", [0, 1, 2, 4, 5])
def test_the_genus_of_a_plate_is_its_number_of_through_holes(n):
    plate = g.box(12 * max(n, 1), 10, 3)
    for i in range(n):
        plate = plate - g.cylinder(4, 5).translate([6 + 12 * i, 5, -1])
    assert g.genus(plate) == n
    blind = plate - g.box(3, 3, 2).translate([1, 1, 2])  # a pocket is not a hole
    assert g.genus(blind) == n


def test_bounding_box_agreement():
    a, b = g.box(10, 10, 10), g.box(10, 10, 5)
    assert g.box_iou(a, a) == 1.0
    assert g.box_iou(a, b) == pytest.approx(0.5)
    assert g.box_iou(a, g.box(1, 1, 1) - g.box(1, 1, 1)) == 0.0


def test_silhouettes_see_through_holes_only_along_them():
    plate = g.box(10, 10, 2) - g.box(2, 2, 4).translate([4, 4, -1])
    solid = g.box(10, 10, 2)
    assert g.view_iou(plate, solid, "top") == pytest.approx(96 / 100)
    assert g.view_iou(plate, solid, "front") == pytest.approx(1.0)
    assert g.view_iou(plate, solid, "side") == pytest.approx(1.0)
    assert g.silhouette(g.box(1, 2, 3), "front").area() == pytest.approx(3)  # x by z
    assert g.silhouette(g.box(1, 2, 3), "side").area() == pytest.approx(6)  # y by z


def test_the_ascii_render_of_an_l_with_a_square_hole():
    # an L: a 6 x 4 x 1 base and a 1 x 4 x 3 upright at x = 0..1; a 2 x 2 hole through the base
    part = (g.box(6, 4, 1) + g.box(1, 4, 3)) - g.box(2, 2, 3).translate([3, 1, -1])
    assert g.render(part, "top", 1) == "\n".join([
        "top view, 1 character = 1 mm: x 0..6 left to right, y 4..0 top to bottom",
        "######",
        "###..#",
        "###..#",
        "######"])
    assert g.render(part, "front", 1) == "\n".join([
        "front view, 1 character = 1 mm: x 0..6 left to right, z 3..0 top to bottom",
        "#.....",
        "#.....",
        "######"])
    assert g.render(part, "side", 1) == "\n".join([  # the hole does not show from the side
        "side view, 1 character = 1 mm: y 0..4 left to right, z 3..0 top to bottom",
        "####",
        "####",
        "####"])
    assert g.render(part, "front", 1.5) == "\n".join([  # cell centres at x 0.75, 2.25, ... and z 2.25, 0.75
        "front view, 1 character = 1.5 mm: x 0..6 left to right, z 3..0 top to bottom",
        "#...",
        "####"])
    assert g.render(part, "top").splitlines()[0].startswith("top view, 1 character = 0.25 mm")  # 24 cells at most
    with pytest.raises(ValueError, match="at least 0.1 mm"):
        g.render(part, "top", 0.05)


def test_lengths_print_short():
    assert [g.fmt(x) for x in (40.0, 2.5, 1 / 3, -0.0001, 12.3456)] == ["40", "2.5", "0.333", "0", "12.346"]
