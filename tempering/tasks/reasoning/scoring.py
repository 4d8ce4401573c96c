"""The scorer wrapper: a reply (the text inside the answer tags) against an entry -> a score in
[0, 1] and a reason.

In order: an empty reply is 0; a dataset's guard (`catalog.FIXED[...].guard`) may refuse the
reply (0) before the scorer sees it; the scorer (the library's, or our replacement) runs on a
copy of the entry; an exception it raises is a 0 for the reply, unless it also fails on its own
oracle answer, which makes it an `InfrastructureError` (the check is broken, not the reply); a
fix then drops partial credit (`full_at`) or a consolation floor (`above`); for numeric answers
(`catalog.MATH_VERIFY`) math-verify may still find the reply equal to the answer in another
notation.

Time: every scorer here is bounded by the reply's length once the guards have run, except the
sympy ones, whose domains are `heavy` (a process the reward service kills at its deadline).
math-verify is called with its own timeouts off (they use SIGALRM, which only the main thread
may set); it only ever sees a literal number or fraction.
"""

from __future__ import annotations

import copy
import functools
import logging
import math
import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Callable

from tempering.verdict import InfrastructureError
from tempering.tasks.reasoning import entries
from tempering.tasks.reasoning.catalog import FIXED, MATH_VERIFY


@dataclass(frozen=True)
class Scored:
    score: float
    reason: str
    raw: float | None = None  # the scorer's own score (the library's or our replacement's) before any fix
    raised: str = ""  # the exception the scorer raised, when it did


def score(dataset: str, built: entries.Built, reply: str) -> Scored:
    """`reply` (the text inside the answer tags) scored against `built` (`entries.resolve`)."""
    text = reply.strip()
    if not text:
        return Scored(0.0, "empty answer")
    scored = _score(dataset, built, text)
    if scored.raised:
        broken = _oracle_failure(dataset, built)
        if broken:
            raise InfrastructureError(f"reasoning/{dataset}: {broken}")
    if scored.score < 1.0 and dataset in MATH_VERIFY and math_equal(text, built.oracle):
        return Scored(1.0, "equal to the answer (math-verify)", scored.raw)
    return scored


def _score(dataset: str, built: entries.Built, text: str) -> Scored:
    fix = FIXED.get(dataset)
    if fix is not None and fix.guard:
        refused = GUARDS[fix.guard](text, built.entry)
        if refused:
            return Scored(0.0, f"refused before scoring: {refused}")
    scorer = SCORERS[fix.scorer] if fix is not None and fix.scorer else built.dataset.score_answer
    try:
        raw = float(scorer(text, copy.deepcopy(built.entry)))
    except Exception as e:  # noqa: BLE001 - a scorer's exception on a reply is that reply's zero
        return Scored(0.0, f"the scorer raised {type(e).__name__} on the answer", raised=f"{type(e).__name__}: {e}")
    if not math.isfinite(raw):
        return Scored(0.0, f"the scorer returned {raw}", raw)
    value = min(max(raw, 0.0), 1.0)
    if fix is not None and fix.full_at is not None:
        value = 1.0 if value >= fix.full_at else 0.0
    elif fix is not None and fix.above is not None and value <= fix.above:
        value = 0.0
    if value >= 1.0:
        return Scored(1.0, "correct", raw)
    if value > 0.0:
        return Scored(value, "partial credit", raw)
    return Scored(0.0, "wrong answer" if raw <= 0.0 else f"wrong answer (the scorer's {raw:.3g} does not count)", raw)


@functools.lru_cache(maxsize=1024)
def _oracle_failure(dataset: str, built: entries.Built) -> str:
    """Why the scorer fails its own oracle answer ("" when it gives it full credit)."""
    if not built.oracle.strip():
        return "the entry has no answer to check the scorer with"
    scored = _score(dataset, built, built.oracle.strip())
    if scored.raised:
        return f"the scorer raises on its own oracle answer ({scored.raised})"
    if scored.score < 1.0:
        return f"the scorer gives its own oracle answer {scored.score:g}"
    return ""


# ---------------------------------------------------------------- guards: reply, entry -> why it is refused, or ""

_NAME = re.compile(r"[A-Za-z][A-Za-z0-9]*")
_BIG_LITERAL = re.compile(r"\d{31,}")
_POWER_EXPONENT = re.compile(r"\*\*\s*\(?\s*-?\s*(\d+)")
_POWER_TOWER = re.compile(r"\*\*\s*\(?\s*-?\s*[\d.]+\s*\)?\s*\*\*")
# sympy names an antiderivative may use: elementary functions and constants, nothing that acts
ELEMENTARY = frozenset({
    "C", "E", "I", "pi", "exp", "log", "ln", "sqrt", "sin", "cos", "tan", "cot", "sec", "csc", "asin", "acos", "atan",
    "acot", "asec", "acsc", "sinh", "cosh", "tanh", "coth", "asinh", "acosh", "atanh", "Abs",
})


def _sympy_expression(text: str, names: frozenset[str] | set[str]) -> str:
    """Why `text` may not reach sympy's parse_expr (which evaluates Python): only digits,
    whitespace, + - * / ** ( ) . and the given names; no huge literals or power towers."""
    if len(text) > 1000:
        return "longer than 1000 characters"
    bad = re.search(r"[^0-9A-Za-z\s+\-*/().]", text)
    if bad:
        return f"the character {bad.group()!r} is not part of the expression syntax"
    unknown = sorted(set(_NAME.findall(text)) - set(names))
    if unknown:
        return f"unknown name {unknown[0]!r}"
    if _BIG_LITERAL.search(text):
        return "a number with more than 30 digits"
    # the answers' exponents are at most 10; simplifying (x+1)**100 already takes seconds
    if any(int(e) > 30 for e in _POWER_EXPONENT.findall(text)) or _POWER_TOWER.search(text):
        return "an exponent over 30 or a tower of powers"
    return ""


def _arithmetic(text: str, entry: dict) -> str:
    """countdown, puzzle24: an arithmetic expression of numbers with + - * / and parentheses."""
    if "**" in text:
        return "'**' is not one of the allowed operators"
    if re.search(r"\d{13,}", text):
        return "a number with more than 12 digits"
    return _sympy_expression(text, frozenset())


def _polynomial(text: str, entry: dict) -> str:
    # the variables are the answer's (the carried entry of polynomial_multiplication has no metadata)
    names = set(_NAME.findall(str(entry["answer"]))) | set(entry["metadata"].get("variables") or ())
    return _sympy_expression(text, names)


def _antiderivative(text: str, entry: dict) -> str:
    return _sympy_expression(text, ELEMENTARY | {entry["metadata"]["variable"]})


def _rush_hour(text: str, entry: dict) -> str:
    # Board.move loops once per requested square, even when blocked: 'A+999999999' is a hang.
    if any(int(n) > 36 for n in re.findall(r"[A-Z][+-](\d+)", text)):
        return "a slide longer than the board"
    return ""


def _rubiks_cube(text: str, entry: dict) -> str:
    # expand_moves repeats a move by its trailing count: 'U999999999' is a billion moves.
    if any(int(n) > 99 for n in re.findall(r"\d+", text)):
        return "a move repeated more than 99 times"
    return ""


def _plain_number(text: str, entry: dict) -> str:
    # Fraction('1e999999999') builds 10**999999999 (a hang and gigabytes).
    if len(text) > 64:
        return "longer than 64 characters"
    if re.search(r"[eE]\s*[+-]?\s*\d{3,}", text):
        return "an exponent of 100 or more"
    return ""


GUARDS: dict[str, Callable[[str, dict], str]] = {
    "arithmetic": _arithmetic, "polynomial": _polynomial, "antiderivative": _antiderivative,
    "rush_hour": _rush_hour, "rubiks_cube": _rubiks_cube, "plain_number": _plain_number,
}


# ---------------------------------------------------------------- replacement scorers: reply, entry -> score

def _true_false(text: str, entry: dict) -> float:
    return 1.0 if text.strip().rstrip(".").strip().lower() == str(entry["answer"]).strip().lower() else 0.0


def _probability(text: str, entry: dict) -> float:
    try:
        got = Fraction(text.replace(",", "").replace(" ", ""))
    except (ValueError, ZeroDivisionError):
        return 0.0
    want = Fraction(str(entry["answer"]))
    return 1.0 if abs(got - want) <= abs(want) / 1000 else 0.0


def _single_number(text: str, entry: dict) -> float:
    core = text.strip()
    if re.fullmatch(r"[+-]?\d{1,3}(,\d{3})+(\.\d+)?", core):
        core = core.replace(",", "")
    if not _INTEGER_OR_DECIMAL.fullmatch(core):
        return 0.0
    return 1.0 if Fraction(core.replace(" ", "")) == Fraction(str(entry["answer"]).strip()) else 0.0


SCORERS: dict[str, Callable[[str, dict], float]] = {
    "true_false": _true_false, "probability": _probability, "single_number": _single_number}


# ---------------------------------------------------------------- math-verify for numeric answers

_NUMBER = r"[+-]?\s*(?:\d+(?:\.\d*)?|\.\d+)"
_INTEGER_OR_DECIMAL = re.compile(_NUMBER)
_FRACTION = re.compile(rf"{_NUMBER}\s*/\s*{_NUMBER}|[+-]?\s*\\d?frac\s*\{{\s*{_NUMBER}\s*\}}\s*\{{\s*{_NUMBER}\s*\}}")
_WRAPPERS = (re.compile(r"^\$+(.*?)\$+$", re.S), re.compile(r"^\\boxed\s*\{(.*)\}$", re.S),
             re.compile(r"^\\\((.*)\\\)$", re.S), re.compile(r"^\\\[(.*)\\\]$", re.S))


def literal_number(text: str, fractions: bool) -> str | None:
    """`text` as a bare number (or fraction, if `fractions`) once the notation around it is
    removed ($...$, \\boxed{...}, \\(...\\), a leading "x =", a final period, spacing commands),
    or None when it is anything else: an expression, a list, words."""
    core = text.strip()
    for _ in range(4):
        before = core
        core = core.replace("\\,", "").replace("\\!", "").replace("\\ ", "").strip().rstrip(".").strip()
        core = re.sub(r"^[A-Za-z]\s*=\s*", "", core)
        for wrapper in _WRAPPERS:
            m = wrapper.match(core)
            if m:
                core = m.group(1).strip()
        if core == before:
            break
    if _INTEGER_OR_DECIMAL.fullmatch(core) or (fractions and _FRACTION.fullmatch(core)):
        return core
    return None


def math_equal(reply: str, answer: str) -> bool:
    """Whether math-verify finds the reply, a literal number, equal to the numeric answer.
    Fractions count only where the answer is not an integer, so that '124/2' (an expression a
    question may hold) is not taken for 62."""
    gold = literal_number(answer, fractions=True)
    if gold is None:
        return False
    try:
        is_integer = _value(gold).is_integer()
    except (ValueError, ZeroDivisionError):
        return False
    pred = literal_number(reply, fractions=not is_integer)
    if pred is None:
        return False
    parse, verify = _math_verify()
    try:
        return bool(verify(parse(gold), parse(pred), timeout_seconds=None))
    except Exception:  # noqa: BLE001 - math-verify on a strange number: not equal
        return False


def _value(text: str) -> float:
    """The value of a literal number or fraction (as `literal_number` returns it)."""
    m = re.fullmatch(rf"({_NUMBER})\s*/\s*({_NUMBER})", text) or re.fullmatch(
        rf"([+-]?)\s*\\d?frac\s*\{{\s*({_NUMBER})\s*\}}\s*\{{\s*({_NUMBER})\s*\}}", text)
    if m is None:
        return float(text.replace(" ", ""))
    if len(m.groups()) == 3:
        sign, num, den = m.groups()
        return (-1 if sign == "-" else 1) * float(num.replace(" ", "")) / float(den.replace(" ", ""))
    return float(m.group(1).replace(" ", "")) / float(m.group(2).replace(" ", ""))


@functools.cache
def _math_verify():
    from math_verify import LatexExtractionConfig, parse, verify

    logging.getLogger("math_verify").setLevel(logging.ERROR)  # "timeout disabled": we mean it
    config = [LatexExtractionConfig()]  # LaTeX is parsed by ANTLR, never eval'd

    def parse_number(text: str):
        return parse(f"${text}$", extraction_config=config, parsing_timeout=None)

    return parse_number, verify
