import random
import textwrap

import pytest
import wrap


def test_examples():
    assert wrap.wrap("aa bb cc", 4) == ["aa", "bb", "cc"]
    assert wrap.wrap("aaa bbb ccc", 7) == ["aaa bbb", "ccc"]
    assert wrap.wrap("", 10) == []
    assert wrap.wrap("  one\ttwo\n three ", 9) == ["one two", "three"]
    assert wrap.wrap("abcdefghij xy", 4) == ["abcdefghij", "xy"]


def test_bad_width():
    with pytest.raises(ValueError):
        wrap.wrap("a", 0)


def test_random_against_textwrap():
    rng = random.Random(3)
    for _ in range(500):
        words = ["x" * rng.randint(1, 8) for _ in range(rng.randint(0, 15))]
        width = rng.randint(1, 20)
        expected = textwrap.wrap(" ".join(words), width, break_long_words=False,
                                 break_on_hyphens=False)
        assert wrap.wrap(" ".join(words), width) == expected
