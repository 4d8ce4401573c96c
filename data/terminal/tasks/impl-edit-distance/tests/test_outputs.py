import functools
import random

import fuzzy


def ref(a, b):
    @functools.lru_cache(None)
    def d(i, j):
        if i == 0 or j == 0:
            return i + j
        return min(d(i - 1, j) + 1, d(i, j - 1) + 1, d(i - 1, j - 1) + (a[i - 1] != b[j - 1]))
    return d(len(a), len(b))


def test_examples():
    assert fuzzy.distance("kitten", "sitting") == 3
    assert fuzzy.distance("", "abc") == 3
    assert fuzzy.distance("abc", "abc") == 0
    assert fuzzy.distance("flaw", "lawn") == 2


def test_random():
    rng = random.Random(6)
    for _ in range(300):
        a = "".join(rng.choice("abc") for _ in range(rng.randint(0, 8)))
        b = "".join(rng.choice("abc") for _ in range(rng.randint(0, 8)))
        assert fuzzy.distance(a, b) == ref(a, b)


def test_long_strings():
    rng = random.Random(1)
    a = "".join(rng.choice("acgt") for _ in range(300))
    b = a[:100] + "x" + a[101:250] + a[260:]
    assert fuzzy.distance(a, b) == 11


def test_closest():
    words = ["apple", "apply", "ample", "maple"]
    assert fuzzy.closest("appel", words) == "apple"
    assert fuzzy.closest("amply", words) == "apply"
    assert fuzzy.closest("zzzzz", words, max_distance=2) is None
    assert fuzzy.closest("mapel", words, max_distance=2) == "maple"
    assert fuzzy.closest("x", []) is None
    assert fuzzy.closest("Apple", ["apple", "Apple"]) == "Apple"
    assert fuzzy.closest("ab", ["ax", "xb"]) == "ax"
