"""The checks every config section runs on its own values. Bounds are declared on the fields as
`typing.Annotated` metadata (`Range`, `Match`, `Holds`; `Each` for the items of a list or the
values of a table, whose names are bounded on the key type: `dict[Annotated[str, Match(...)], X]`), and `check_fields` checks every field against its type and its
metadata, however the section was built (from TOML, or in code as `LLM(model, attention=...)`
does). A failure is a `ConfigError` of one line: the key, what was expected, the value given.
Relations between fields are not bounds: the sections check those themselves (`_require`).
It knows no section."""

from __future__ import annotations

import functools
import math
import numbers
import re
import types
import typing
from dataclasses import dataclass
from typing import Any, Callable, Literal, Mapping

from tempering.errors import UserError

NONBLANK = r"(?s)\s*\S.*"  # a `Match` pattern: any text but blanks


class ConfigError(UserError):
    """A config value that cannot be used; the message names source, key and expectation."""


def _require(ok: bool, key: str, expected: str, value: Any) -> None:
    if not ok:
        raise ConfigError(f"{key}: expected {expected}, got {value!r}")


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(x)


@dataclass(frozen=True)
class Range:
    """A number's bounds (annotated-types' names): `ge` or `gt` below, `le` or `lt` above. The
    message calls it `what` (default: "an integer" or "a number", by the field's type), then
    `note` in parentheses; `zero` (what 0 means) allows 0 besides the bounds."""

    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None
    what: str = ""
    note: str = ""
    zero: str = ""

    def holds(self, v: float) -> bool:
        return (bool(self.zero) and v == 0) or not (
            (self.ge is not None and v < self.ge) or (self.gt is not None and v <= self.gt)
            or (self.le is not None and v > self.le) or (self.lt is not None and v >= self.lt))

    def describe(self, what: str) -> str:
        low = ("[", ">=", self.ge) if self.ge is not None else ("(", ">", self.gt)
        high = ("]", "<=", self.le) if self.le is not None else (")", "<", self.lt)
        if low[2] is not None and high[2] is not None:
            text = f"{what} in {low[0]}{_num(low[2])}, {_num(high[2])}{high[0]}"
        else:
            text = f"{what} {low[1]} {_num(low[2])}" if low[2] is not None else f"{what} {high[1]} {_num(high[2])}"
        return (f"0 ({self.zero}) or " if self.zero else "") + text + (f" ({self.note})" if self.note else "")

    def __str__(self) -> str:
        return self.describe(self.what or "a value")


@dataclass(frozen=True)
class Match:
    """A string that `pattern` matches whole; `what` says which in words."""

    pattern: str
    what: str

    def holds(self, v: str) -> bool:
        return re.fullmatch(self.pattern, v) is not None

    def __str__(self) -> str:
        return self.what


@dataclass(frozen=True)
class Holds:
    """A value for which `test` is true; `what` says which in words."""

    test: Callable[[Any], bool]
    what: str

    def holds(self, v: Any) -> bool:
        return bool(self.test(v))

    def __str__(self) -> str:
        return self.what


Bound = Range | Match | Holds


@dataclass(frozen=True)
class Each:
    """`bound` on every item of a list, or every value of a table (named by its key)."""

    bound: Bound

    def __str__(self) -> str:
        return f"each: {self.bound}"


def describe(tp: Any) -> str:
    """What a value of type `tp` looks like, for error messages."""
    if typing.get_origin(tp) is Literal:
        return "one of " + ", ".join(map(repr, typing.get_args(tp)))
    if typing.get_origin(tp) in (typing.Union, types.UnionType):  # its choices are named alone: "an integer or 'auto'"
        return " or ".join(" or ".join(map(repr, typing.get_args(a))) if typing.get_origin(a) is Literal
                           else describe(a) for a in typing.get_args(tp) if a is not type(None))
    return {bool: "true or false", int: "an integer", float: "a number", str: "a string"}.get(tp, "a table")


def check_fields(section: Any, name: str, replaced: Mapping[str, Mapping[str, str]] | None = None) -> None:
    """Every field of `section` (named `name` in messages) against its type and declared bounds.
    `replaced` (key -> old value -> what to write now) marks a section whose choices name
    registry parts: an unknown one is named so, with what replaced a value of an older release."""
    for key, tp in _hints(type(section)).items():
        _check(tp, getattr(section, key), f"{name}.{key}", replaced.get(key, {}) if replaced is not None else None)


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls, include_extras=True)


def _check(tp: Any, value: Any, key: str, replaced: Mapping[str, str] | None = None) -> None:
    bounds: tuple[Any, ...] = ()
    if typing.get_origin(tp) is typing.Annotated:
        tp, *bounds = typing.get_args(tp)
    _check_type(tp, value, key, replaced)
    for b in bounds:
        if isinstance(b, Each) and isinstance(value, Mapping):
            for k, v in value.items():
                _bound(b.bound, typing.get_args(tp)[1], v, f"{key}.{k}")
        elif isinstance(b, Each):
            for v in value:
                _bound(b.bound, typing.get_args(tp)[0], v, key)
        else:
            _bound(b, tp, value, key)


def _bound(b: Bound, tp: Any, value: Any, key: str) -> None:
    """`b` on `value`; in `int | Literal[...]` it bounds the numbers and the message adds the choices."""
    union = typing.get_origin(tp) in (typing.Union, types.UnionType)
    choices = [c for a in typing.get_args(tp) if union and typing.get_origin(a) is Literal for c in typing.get_args(a)]
    if choices and value in choices:
        return
    if not b.holds(value):
        number = int if int in typing.get_args(tp) or tp is int else float
        expected = b.describe(b.what or describe(number)) if isinstance(b, Range) else b.what
        _require(False, key, expected + "".join(f" or {c!r}" for c in choices), value)


def _check_type(tp: Any, value: Any, key: str, replaced: Mapping[str, str] | None) -> None:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is Literal:
        if value in args:
            return
        if replaced is None:
            _require(False, key, describe(tp), value)
        now = replaced.get(value) if isinstance(value, str) else None
        raise ConfigError(f"{key}: unknown {value!r} (known: {', '.join(sorted(args))})"
                          + (f"; {value!r} was replaced: write {now}" if now else ""))
    if origin in (typing.Union, types.UnionType):
        _require(any(_fits(a, value) for a in args), key, describe(tp), value)
    elif origin in (tuple, list):
        _require(isinstance(value, (tuple, list)), key, "a list", value)
        for v in value:
            _check(args[0], v, key)
    elif origin is dict:
        _require(isinstance(value, Mapping), key, "a table", value)
        for k, v in value.items():
            _check(args[0], k, f"{key}.{k}")  # a table's names: `section.field.<name>` is the key
            _check(args[1], v, f"{key}.{k}")
    elif tp in (bool, int, float, str):
        _require(_fits(tp, value), key, describe(tp), value)


def _fits(tp: Any, value: Any) -> bool:
    if typing.get_origin(tp) is Literal:
        return value in typing.get_args(tp)
    if tp is type(None):
        return value is None
    if tp is bool or tp is str:
        return isinstance(value, tp)
    if tp is int:
        return isinstance(value, numbers.Integral) and not isinstance(value, bool)
    if tp is float:
        return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)
    try:
        _check_type(tp, value, "", None)
    except ConfigError:
        return False
    return True
