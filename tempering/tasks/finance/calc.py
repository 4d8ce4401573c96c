"""`evaluate`: the `calculate` tool's arithmetic, safe to run on anything a model writes.

The expression is parsed with `ast` (never `eval`) and only numbers, `+ - * / **`, parentheses
and unary signs are allowed; a name, a call, an attribute, a subscript, a comparison or anything
else is refused with an error naming it. Arithmetic is exact (`Fraction`), except a power with a
fractional exponent (a CAGR's `** (1/3)`), which is computed in floating point. Limits keep
every call cheap: the expression's length and node count, the size of every number and every
intermediate result, and integer exponents.

For convenience, before parsing: thousands separators in figures (`1,234,567`) are removed, `$`
and spaces are ignored, `x%` is `x/100`, `^` is a power, and the Unicode minus and multiplication
and division signs are their ASCII operators. Parentheses group: `(1,234)` is 1234, not a negative.
"""

from __future__ import annotations

import ast
import math
import re
from decimal import Decimal, localcontext
from fractions import Fraction

MAX_CHARS = 500
MAX_NODES = 200
MAX_BITS = 4096  # of an intermediate result's numerator or denominator
MAX_EXPONENT = 1000
MAX_LITERAL = 40  # characters of one number


class CalcError(ValueError):
    """An expression the calculator refuses or cannot compute; the message says why."""


_OPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.Pow: "**"}
_REFUSED = {ast.Name: "names", ast.Call: "function calls", ast.Attribute: "attribute access",
            ast.Subscript: "subscripts", ast.Compare: "comparisons", ast.BoolOp: "boolean operators",
            ast.Lambda: "lambdas", ast.IfExp: "conditional expressions", ast.Tuple: "tuples (a comma?)",
            ast.List: "lists", ast.Dict: "dicts", ast.Set: "sets", ast.JoinedStr: "strings",
            ast.ListComp: "comprehensions", ast.GeneratorExp: "comprehensions", ast.NamedExpr: "assignments",
            ast.Starred: "starred expressions", ast.Await: "await"}


def _prepare(text: str) -> str:
    text = text.strip().strip("`").strip()
    for a, b in (("−", "-"), ("–", "-"), ("×", "*"), ("÷", "/"), ("^", "**"), ("$", "")):
        text = text.replace(a, b)
    text = re.sub(r"(?<=\d),(?=\d{3}(?!\d))", "", text)  # 1,234,567 -> 1234567
    text = re.sub(r"(?<![\d.])(\d+(?:\.\d*)?|\.\d+)\s*%", r"(\1/100)", text)
    return text


def evaluate(expression: str) -> str:
    """The value of `expression`, as text: an integer exactly, anything else to 12 significant
    digits. Raises `CalcError` for anything but arithmetic on numbers, or past the limits."""
    if len(expression) > MAX_CHARS:
        raise CalcError(f"the expression is too long ({len(expression)} characters; at most {MAX_CHARS})")
    text = _prepare(expression)
    if not text:
        raise CalcError("no expression given")
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as e:
        raise CalcError(f"cannot read the expression: {getattr(e, 'msg', None) or e}") from None
    nodes = list(ast.walk(tree))
    if len(nodes) > MAX_NODES:
        raise CalcError(f"the expression is too complex ({len(nodes)} parts; at most {MAX_NODES})")
    for node in nodes:
        if type(node) in _REFUSED:
            raise CalcError(f"not allowed: {_REFUSED[type(node)]} (only numbers, + - * / ** and parentheses)")
    return _show(_eval(tree.body, text))


def _eval(node: ast.AST, source: str) -> Fraction:
    if isinstance(node, ast.Constant):
        if isinstance(node.value, bool) or not isinstance(node.value, (int, float)):
            raise CalcError(f"only numbers are allowed, not {node.value!r}")
        literal = ast.get_source_segment(source, node) or repr(node.value)
        if len(literal) > MAX_LITERAL:
            raise CalcError(f"the number {literal[:20]}... is too long (at most {MAX_LITERAL} characters)")
        try:
            value = Fraction(literal.replace("_", ""))
        except (ValueError, ZeroDivisionError):
            raise CalcError(f"cannot read the number {literal!r}") from None
        return _check(value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _eval(node.operand, source)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        a, b = _eval(node.left, source), _eval(node.right, source)
        if isinstance(node.op, ast.Add):
            return _check(a + b)
        if isinstance(node.op, ast.Sub):
            return _check(a - b)
        if isinstance(node.op, ast.Mult):
            return _check(a * b)
        if isinstance(node.op, ast.Div):
            if b == 0:
                raise CalcError("division by zero")
            return _check(a / b)
        return _power(a, b)
    what = type(node).__name__
    if isinstance(node, ast.BinOp):
        what = f"the operator {type(node.op).__name__}"
    elif isinstance(node, ast.UnaryOp):
        what = f"the operator {type(node.op).__name__}"
    raise CalcError(f"not allowed: {what} (only numbers, + - * / ** and parentheses)")


def _power(a: Fraction, b: Fraction) -> Fraction:
    if b.denominator == 1:
        e = b.numerator
        if abs(e) > MAX_EXPONENT:
            raise CalcError(f"the exponent {e} is too large (at most {MAX_EXPONENT})")
        if a == 0 and e < 0:
            raise CalcError("division by zero")
        size = max(a.numerator.bit_length(), a.denominator.bit_length())
        if size * abs(e) > MAX_BITS:
            raise CalcError("the result is too large")
        return _check(a ** e)
    if a < 0:
        raise CalcError("a negative number to a fractional power")
    try:
        value = float(a) ** float(b)
    except (OverflowError, ZeroDivisionError):
        raise CalcError("the result is too large") from None
    if not math.isfinite(value):
        raise CalcError("the result is too large")
    return _check(Fraction(value))


def _check(value: Fraction) -> Fraction:
    if value.numerator.bit_length() > MAX_BITS or value.denominator.bit_length() > MAX_BITS:
        raise CalcError("a number in the calculation is too large")
    return value


def _show(value: Fraction) -> str:
    if value.denominator == 1 and abs(value.numerator) < 10 ** 30:
        return str(value.numerator)
    with localcontext() as ctx:
        ctx.prec = 12
        d = Decimal(value.numerator) / Decimal(value.denominator)
    if d != 0 and not (Decimal("1e-6") <= abs(d) < Decimal("1e15")):
        mantissa, _, exp = f"{d:.11e}".partition("e")
        mantissa = mantissa.rstrip("0").rstrip(".")
        return f"{mantissa}e{int(exp)}"
    text = f"{d:f}"
    return text.rstrip("0").rstrip(".") if "." in text else text
