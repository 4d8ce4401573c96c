import random

import pytest
import rle


def test_encode_examples():
    assert rle.encode("aaabccdddd") == "3a1b2c4d"
    assert rle.encode("") == ""
    assert rle.encode("x" * 12) == "12x"
    assert rle.encode("ab") == "1a1b"
    assert rle.encode("  !") == "2 1!"


def test_decode_examples():
    assert rle.decode("3a1b2c4d") == "aaabccdddd"
    assert rle.decode("") == ""
    assert rle.decode("12x1y") == "x" * 12 + "y"


@pytest.mark.parametrize("bad", ["3", "a", "3ab", "0a", "1a2"])
def test_malformed(bad):
    with pytest.raises(ValueError):
        rle.decode(bad)


def test_round_trip():
    rng = random.Random(8)
    for _ in range(500):
        s = "".join(rng.choice("ab c") * rng.randint(1, 14) for _ in range(rng.randint(0, 6)))
        assert rle.decode(rle.encode(s)) == s
