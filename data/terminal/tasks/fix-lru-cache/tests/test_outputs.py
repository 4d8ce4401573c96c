import random
from collections import OrderedDict

import pytest
from lru import LRUCache


def test_get_counts_as_use():
    c = LRUCache(2)
    c.put("a", 1)
    c.put("b", 2)
    assert c.get("a") == 1
    c.put("c", 3)
    assert "a" in c and "c" in c and "b" not in c
    assert len(c) == 2


def test_contains_is_not_a_use():
    c = LRUCache(2)
    c.put("a", 1)
    c.put("b", 2)
    assert "a" in c
    c.put("c", 3)
    assert "a" not in c and "b" in c


def test_update_existing():
    c = LRUCache(2)
    c.put("a", 1)
    c.put("b", 2)
    c.put("a", 10)
    assert len(c) == 2 and c.get("a") == 10
    c.put("c", 3)
    assert "b" not in c and c.get("a") == 10


def test_default_and_capacity():
    c = LRUCache(1)
    assert c.get("x") is None and c.get("x", 5) == 5
    with pytest.raises(ValueError):
        LRUCache(0)


def test_random_against_model():
    rng = random.Random(7)
    for cap in (1, 2, 3, 5):
        c, model = LRUCache(cap), OrderedDict()
        for _ in range(400):
            k = rng.randint(0, 7)
            if rng.random() < 0.5:
                expected = model.get(k)
                if k in model:
                    model.move_to_end(k)
                assert c.get(k) == expected
            else:
                model[k] = rng.random()
                model.move_to_end(k)
                if len(model) > cap:
                    model.popitem(last=False)
                c.put(k, model[k])
            assert len(c) == len(model)
            assert all((key in c) for key in model)
