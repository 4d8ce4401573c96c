import ast
from pathlib import Path

import pytest
import textkit
import textutils

GROUPS = {"cases": ["snake_case", "camel_case"], "clean": ["strip_accents", "collapse_spaces"],
          "count": ["word_count", "char_histogram"]}


def test_layout():
    for module, names in GROUPS.items():
        for name in names:
            f = getattr(textkit, name)
            assert f.__module__ == f"textkit.{module}", (name, f.__module__)
            assert getattr(textutils, name) is f


def test_shim_defines_nothing():
    tree = ast.parse(Path(textutils.__file__).read_text())
    assert not [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.Lambda, ast.ClassDef))]


@pytest.mark.parametrize("name, arg, out", [
    ("snake_case", "HelloWorld foo-bar", "hello_world_foo_bar"),
    ("snake_case", "  already_snake ", "already_snake"),
    ("camel_case", "hello_world foo", "helloWorldFoo"),
    ("camel_case", "--", ""),
    ("strip_accents", "café Ångström", "cafe Angstrom"),
    ("collapse_spaces", "  a   b\t\nc ", "a b c"),
    ("word_count", "one, two; three_3", 3),
    ("char_histogram", "Banana!", [("a", 3), ("n", 2), ("b", 1)]),
])
def test_behaviour(name, arg, out):
    assert getattr(textkit, name)(arg) == out
    assert getattr(textutils, name)(arg) == out
