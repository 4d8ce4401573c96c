import pytest
import stats


@pytest.mark.parametrize("values, expected", [
    ([1, 2, 3, 4], 2.5), ([5, 1, 3, 2], 2.5), ([7], 7), ([3, 1, 2], 2), ([1, 1, 2, 2], 1.5),
    ([-4, 10], 3), ([2.5, 0.5, 1.5, 3.5], 2.0), ([9, 8, 7, 6, 5, 4], 6.5),
])
def test_median(values, expected):
    assert stats.median(values) == pytest.approx(expected)


def test_median_does_not_modify_input():
    data = [4, 3, 2, 1]
    stats.median(data)
    assert data == [4, 3, 2, 1]


def test_empty_raises():
    for f in (stats.mean, stats.median, stats.mode):
        with pytest.raises(ValueError):
            f([])


def test_others_unchanged():
    assert stats.mean([1, 2, 3, 4]) == 2.5
    assert stats.mode([3, 1, 3, 1, 2]) == 1
    assert stats.mode([5, 5, 2]) == 5
    assert stats.variance([1, 2, 3, 4]) == pytest.approx(1.25)
