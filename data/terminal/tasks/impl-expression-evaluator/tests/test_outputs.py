import ast
import random
from pathlib import Path

import pytest
import calc


def c_div(a, b):
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


@pytest.mark.parametrize("expr, value", [
    ("1 + 2 * 3", 7), ("(1 + 2) * 3", 9), ("8 - 3 - 2", 3), ("7 / 2", 3), ("-7 / 2", -3),
    ("7 / -2", -3), ("--3", 3), ("2 * -3", -6), (" 007 ", 7), ("100 / 10 / 3", 3),
    ("-(2 + 3) * 4", -20), ("+5", 5), ("((((1))))", 1), ("2*3+4*5-6/2", 23),
])
def test_examples(expr, value):
    assert calc.evaluate(expr) == value


@pytest.mark.parametrize("bad", ["", "1 +", "(1", "1)", "1 2", "2 ** 3", "x", "()", "1 + * 2"])
def test_malformed(bad):
    with pytest.raises(ValueError):
        calc.evaluate(bad)


def test_zero_division():
    with pytest.raises(ZeroDivisionError):
        calc.evaluate("1 / (2 - 2)")


def gen(rng, depth):
    if depth == 0 or rng.random() < 0.3:
        n = rng.randint(0, 50)
        return str(n), n
    if rng.random() < 0.15:
        s, v = gen(rng, depth - 1)
        return f"-({s})", -v
    (ls, lv), (rs, rv) = gen(rng, depth - 1), gen(rng, depth - 1)
    op = rng.choice("+-*/")
    if op == "/" and rv == 0:
        op = "+"
    v = {"+": lv + rv, "-": lv - rv, "*": lv * rv}.get(op) if op != "/" else c_div(lv, rv)
    return f"({ls} {op} {rs})", v


def test_random():
    rng = random.Random(21)
    for _ in range(400):
        s, v = gen(rng, 4)
        assert calc.evaluate(s) == v, s


def test_no_eval():
    tree = ast.parse(Path(calc.__file__).read_text())
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    assert not names & {"eval", "exec", "compile"}
