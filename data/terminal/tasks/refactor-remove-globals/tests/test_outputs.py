import ast
from pathlib import Path

import wordstats


def test_class_behaviour():
    a, b = wordstats.WordCounter(), wordstats.WordCounter()
    a.add("The cat and the hat. The END")
    b.add("dog dog cat")
    assert a.top(2) == [("the", 3), ("and", 1)]
    assert a.total() == 7
    assert b.top(5) == [("dog", 2), ("cat", 1)]
    assert b.total() == 3
    a.reset()
    assert a.total() == 0 and a.top(3) == []
    assert b.total() == 3


def test_module_functions_share_default():
    wordstats.reset()
    wordstats.add("don't stop, don't")
    assert wordstats.top(1) == [("don't", 2)]
    assert wordstats.total() == 3
    assert wordstats.default.total() == 3
    assert isinstance(wordstats.default, wordstats.WordCounter)
    other = wordstats.WordCounter()
    other.add("x y z")
    assert wordstats.total() == 3
    wordstats.reset()
    assert wordstats.total() == 0 and wordstats.default.top(1) == []


def test_no_globals():
    tree = ast.parse(Path(wordstats.__file__).read_text())
    assert not [n for n in ast.walk(tree) if isinstance(n, ast.Global)]
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            value = node.value
            assert not isinstance(value, (ast.Dict, ast.List, ast.Set, ast.DictComp, ast.ListComp)), ast.dump(node)
            if isinstance(value, ast.Call) and isinstance(value.func, ast.Name):
                assert value.func.id in ("WordCounter",), ast.dump(node)
