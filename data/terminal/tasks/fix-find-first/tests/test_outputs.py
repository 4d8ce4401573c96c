import bisect
import random

import search


class Counting(int):
    calls = 0

    def _cmp(self, other, op):
        Counting.calls += 1
        return op(int(self), int(other))

    def __lt__(self, o): return self._cmp(o, int.__lt__)
    def __le__(self, o): return self._cmp(o, int.__le__)
    def __gt__(self, o): return self._cmp(o, int.__gt__)
    def __ge__(self, o): return self._cmp(o, int.__ge__)
    def __eq__(self, o): return self._cmp(o, int.__eq__)
    def __ne__(self, o): return self._cmp(o, int.__ne__)
    __hash__ = int.__hash__


def expected(items, t):
    i = bisect.bisect_left(items, t)
    return i if i < len(items) and items[i] == t else -1


def test_examples():
    assert search.find_first([1, 2, 2, 2, 3], 2) == 1
    assert search.find_first([], 1) == -1
    assert search.find_first([5], 5) == 0
    assert search.find_first([1, 3], 3) == 1
    assert search.find_first([1, 3], 2) == -1
    assert search.count([1, 2, 2, 2, 3], 2) == 3


def test_random():
    rng = random.Random(99)
    for _ in range(2000):
        items = sorted(rng.randint(0, 10) for _ in range(rng.randint(0, 12)))
        t = rng.randint(-1, 11)
        assert search.find_first(items, t) == expected(items, t), (items, t)
        assert search.count(items, t) == items.count(t)


def test_logarithmic():
    items = [Counting(i // 3) for i in range(300_000)]
    Counting.calls = 0
    assert search.find_first(items, Counting(54321)) == 162963
    assert Counting.calls < 200
