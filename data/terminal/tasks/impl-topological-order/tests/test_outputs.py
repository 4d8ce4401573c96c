import random

import pytest
import deps


def test_example():
    assert deps.build_order({"app": ["lib", "log"], "lib": ["log"]}) == ["log", "lib", "app"]
    assert deps.build_order({}) == []
    assert deps.build_order({"b": [], "a": []}) == ["a", "b"]
    assert deps.build_order({"z": ["y"], "a": ["y"]}) == ["y", "a", "z"]


def test_cycles():
    with pytest.raises(deps.CycleError) as e:
        deps.build_order({"a": ["b"], "b": ["c"], "c": ["a"], "d": ["a"], "e": []})
    assert e.value.cycle == ["a", "b", "c", "d"]
    with pytest.raises(deps.CycleError) as e:
        deps.build_order({"x": ["x"]})
    assert e.value.cycle == ["x"]


def reference(graph):
    nodes = set(graph) | {d for ds in graph.values() for d in ds}
    done, order = set(), []
    while True:
        ready = sorted(n for n in nodes - done if all(d in done for d in graph.get(n, [])))
        if not ready:
            break
        order.append(ready[0])
        done.add(ready[0])
    return order, sorted(nodes - done)


def test_random():
    rng = random.Random(2)
    names = [chr(ord("a") + i) for i in range(9)]
    for _ in range(300):
        graph = {n: rng.sample(names, rng.randint(0, 2)) for n in rng.sample(names, rng.randint(0, 9))}
        order, stuck = reference(graph)
        if stuck:
            with pytest.raises(deps.CycleError) as e:
                deps.build_order(graph)
            assert e.value.cycle == stuck
        else:
            assert deps.build_order(graph) == order
