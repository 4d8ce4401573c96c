import random

import intervals


def reference(items):
    out = []
    for s, e in sorted(items):
        if out and s <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((s, e))
    return out


def test_examples():
    assert intervals.merge([(5, 6), (1, 2)]) == [(1, 2), (5, 6)]
    assert intervals.merge([(1, 3), (3, 5)]) == [(1, 5)]
    assert intervals.merge([]) == []
    assert intervals.merge([(1, 10), (2, 3), (4, 5)]) == [(1, 10)]
    assert intervals.merge([(4, 4), (1, 2)]) == [(1, 2), (4, 4)]


def test_does_not_modify_input():
    data = [(3, 4), (1, 2)]
    intervals.merge(data)
    assert data == [(3, 4), (1, 2)]


def test_random_against_reference():
    rng = random.Random(1234)
    for _ in range(300):
        items = []
        for _ in range(rng.randint(0, 8)):
            s = rng.randint(-20, 20)
            items.append((s, s + rng.randint(0, 6)))
        assert [tuple(x) for x in intervals.merge(list(items))] == reference(items)
