import copy

import settings


def test_nested_merge():
    assert settings.deep_merge({"db": {"host": "a", "port": 1}}, {"db": {"port": 2}}) == \
        {"db": {"host": "a", "port": 2}}
    a = {"x": 1, "n": {"a": {"b": 1, "c": 2}, "l": [1]}}
    b = {"y": 2, "n": {"a": {"c": 3}, "l": [2]}}
    assert settings.deep_merge(a, b) == {"x": 1, "y": 2, "n": {"a": {"b": 1, "c": 3}, "l": [2]}}


def test_non_dict_overrides_dict_and_back():
    assert settings.deep_merge({"a": {"b": 1}}, {"a": 5}) == {"a": 5}
    assert settings.deep_merge({"a": 5}, {"a": {"b": 1}}) == {"a": {"b": 1}}


def test_arguments_untouched_and_unshared():
    base = {"db": {"host": "a", "opts": {"x": 1}}, "k": 1}
    over = {"db": {"port": 2, "extra": {"y": 2}}}
    b0, o0 = copy.deepcopy(base), copy.deepcopy(over)
    result = settings.deep_merge(base, over)
    assert base == b0 and over == o0
    result["db"]["opts"]["x"] = 99
    result["db"]["extra"]["y"] = 99
    result["db"]["host"] = "changed"
    assert base == b0 and over == o0


def test_load_layers():
    assert settings.load({"a": {"b": 1}}, {"a": {"c": 2}}, {"a": {"b": 3}, "d": 4}) == \
        {"a": {"b": 3, "c": 2}, "d": 4}
    assert settings.load() == {}
