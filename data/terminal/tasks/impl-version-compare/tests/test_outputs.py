import random

import pytest
import versions

ORDER = ["0.9.9", "1.0.0-alpha", "1.0.0-alpha.1", "1.0.0-alpha.beta", "1.0.0-beta",
         "1.0.0-beta.2", "1.0.0-beta.11", "1.0.0-rc.1", "1.0.0", "1.0.1", "1.9.0", "1.10.0",
         "2.0.0-0", "2.0.0-0.a", "2.0.0-1", "2.0.0-A", "2.0.0-a", "2.0.0"]


def test_pairs():
    for i, a in enumerate(ORDER):
        for j, b in enumerate(ORDER):
            expected = (i > j) - (i < j)
            assert versions.compare(a, b) == expected, (a, b)


def test_build_ignored():
    assert versions.compare("1.0.0+001", "1.0.0+exp.sha") == 0
    assert versions.compare("1.0.0-rc.1+b", "1.0.0-rc.1") == 0
    assert versions.compare("1.0.0+b", "1.0.0-rc.1") == 1


def test_sort():
    rng = random.Random(4)
    shuffled = ORDER[:]
    rng.shuffle(shuffled)
    before = shuffled[:]
    assert versions.sort_versions(shuffled) == ORDER
    assert shuffled == before
    assert versions.sort_versions(["1.0.0+b", "1.0.0+a", "0.1.0"]) == ["0.1.0", "1.0.0+b", "1.0.0+a"]


@pytest.mark.parametrize("bad", ["1.0", "1.0.0-", "a.b.c", "1.0.0.0", "", "1..0", "-1.0.0"])
def test_invalid(bad):
    with pytest.raises(ValueError):
        versions.compare(bad, "1.0.0")
