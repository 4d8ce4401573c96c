import datetime

import pytest
import calendar_utils as cu


def test_is_leap():
    for y in range(1583, 2500):
        expected = (y % 4 == 0 and y % 100 != 0) or y % 400 == 0
        assert cu.is_leap(y) == expected, y


def test_days_in_month():
    assert cu.days_in_month(1900, 2) == 28
    assert cu.days_in_month(2000, 2) == 29
    assert cu.days_in_month(2024, 4) == 30
    with pytest.raises(ValueError):
        cu.days_in_month(2024, 13)


def test_day_of_year_against_datetime():
    for y in (1900, 2000, 2023, 2024, 2100):
        d = datetime.date(y, 1, 1)
        while d.year == y:
            assert cu.day_of_year(d.year, d.month, d.day) == d.timetuple().tm_yday
            d += datetime.timedelta(days=1)


def test_invalid_day():
    with pytest.raises(ValueError):
        cu.day_of_year(1900, 2, 29)
    with pytest.raises(ValueError):
        cu.day_of_year(2024, 1, 0)
