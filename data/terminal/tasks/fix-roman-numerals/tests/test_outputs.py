import pytest
import roman


def test_examples():
    assert roman.from_roman("XIV") == 14
    assert roman.from_roman("MCMXC") == 1990
    assert roman.from_roman("mmxxiv") == 2024
    assert roman.from_roman("III") == 3


def test_round_trip():
    for n in range(1, 4000):
        assert roman.from_roman(roman.to_roman(n)) == n


@pytest.mark.parametrize("bad", ["", "ABC", "X1"])
def test_invalid(bad):
    with pytest.raises(ValueError):
        roman.from_roman(bad)


def test_to_roman_unchanged():
    assert roman.to_roman(1994) == "MCMXCIV"
    with pytest.raises(ValueError):
        roman.to_roman(0)
