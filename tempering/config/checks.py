"""The checks every config section runs on its own values: `ConfigError`, whose message names
the key, what was expected and what was given, and the helpers the sections call. It knows no
section."""

from __future__ import annotations

import typing
from typing import Any, Literal, Mapping

from tempering.errors import UserError


class ConfigError(UserError):
    """A config value that cannot be used; the message names source, key and expectation."""


def _require(ok: bool, key: str, expected: str, value: Any) -> None:
    if not ok:
        raise ConfigError(f"{key}: expected {expected}, got {value!r}")


def _require_choices(section: Any, name: str) -> None:
    """Every `Literal[...]` field holds one of its choices, however the section was built (from
    TOML, or directly in code as `LLM(model, attention=...)` does)."""
    for key, tp in typing.get_type_hints(type(section)).items():
        if typing.get_origin(tp) is Literal:
            choices = typing.get_args(tp)
            value = getattr(section, key)
            _require(value in choices, f"{name}.{key}", "one of " + ", ".join(map(repr, choices)), value)


def _require_known(section: Any, name: str, replaced: Mapping[str, Mapping[str, str]] = {}) -> None:
    """Every `Literal[...]` field names a known algorithm part; the message lists the names, and
    for a value of an older release (`replaced`: key -> old value -> what to write now) what
    replaced it."""
    for key, tp in typing.get_type_hints(type(section)).items():
        value = getattr(section, key)
        if typing.get_origin(tp) is Literal and value not in typing.get_args(tp):
            now = replaced.get(key, {}).get(value) if isinstance(value, str) else None
            raise ConfigError(f"{name}.{key}: unknown {value!r} (known: {', '.join(sorted(typing.get_args(tp)))})"
                              + (f"; {value!r} was replaced: write {now}" if now else ""))
