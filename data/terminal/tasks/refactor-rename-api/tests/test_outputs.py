import math
import warnings

import pytest
import geometry
import report


def test_new_names_no_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert geometry.circle_area(2) == pytest.approx(4 * math.pi)
        assert geometry.rect_perimeter(2, 3) == 10
        assert geometry.distance_between((0, 0), (3, 4)) == 5
    with pytest.raises(ValueError):
        geometry.circle_area(-1)


@pytest.mark.parametrize("old, new, args", [
    ("circleArea", "circle_area", (1.5,)),
    ("rectPerimeter", "rect_perimeter", (2, 7)),
    ("distanceBetween", "distance_between", ((1, 1), (4, 5))),
])
def test_old_names_warn(old, new, args):
    with pytest.warns(DeprecationWarning, match=new):
        value = getattr(geometry, old)(*args)
    assert value == getattr(geometry, new)(*args)


def test_report_uses_new_names():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert report.summary([(0, 0), (3, 4), (3, 0)]) == {"length": 9.0, "area": 254.469, "box": 14}
    src = open(report.__file__).read()
    assert "circleArea" not in src and "distanceBetween" not in src and "rectPerimeter" not in src
