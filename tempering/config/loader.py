"""Loading the config tree: TOML, then `--section.key=value` overrides, into the typed sections
of `tempering.config`, checking names and types on the way (each section checks its own
bounds). A key of an older release that moved is named with the key that replaced it
(`KEYS_REPLACED`). It knows the sections only through their type hints."""

from __future__ import annotations

import dataclasses
import math
import tomllib
import types
import typing
from pathlib import Path
from typing import Any, Literal

from tempering.config.checks import ConfigError, _require, describe
from tempering.config.sections import KEYS_REPLACED, Config


def load_config(path: str | Path | None = None, overrides: list[str] = ()) -> Config:
    """Read TOML at `path` (or the defaults), apply `--section.key=value` overrides, validate."""
    raw: dict[str, Any] = {}
    source = "defaults"
    if path is not None:
        source = str(path)
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"{source}: no such config file")
        try:
            raw = tomllib.loads(p.read_text())
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"{source}: not valid TOML: {e}") from None
    try:
        tree = _build(Config, raw, "")
    except ConfigError as e:
        raise ConfigError(f"{source}: {e}") from None
    for item in overrides:
        key, value = _parse_override(item)
        try:
            tree = _apply(tree, key, value)
        except ConfigError as e:
            raise ConfigError(f"command line {item!r}: {e}") from None
    return tree


def to_dict(cfg: Any) -> dict[str, Any]:
    return dataclasses.asdict(cfg)


def _parse_override(item: str) -> tuple[str, Any]:
    if not item.startswith("--") or "=" not in item:
        raise ConfigError(f"command line {item!r}: overrides look like --section.key=value")
    key, text = item[2:].split("=", 1)
    try:
        value = tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        value = text  # bare words are strings: --run.name=demo
    return key, value


def _apply(tree: Config, dotted: str, value: Any) -> Config:
    raw = to_dict(tree)
    parts = dotted.split(".")
    if len(parts) < 2:
        raise ConfigError(f"{dotted}: overrides name a section and a key, like --trainer.lr=1e-4")
    node = raw
    for p in parts[:-1]:
        if p not in node or not isinstance(node[p], dict):
            raise ConfigError(f"{dotted}: unknown section or key {p!r}")
        node = node[p]
    node[parts[-1]] = value
    return _build(Config, raw, "")


def _build(cls: type, raw: Any, prefix: str) -> Any:
    where = prefix.rstrip(".") or "top level"
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a table, got {raw!r}")
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(raw) - names)
    if unknown:
        old = f"{prefix}{unknown[0]}"
        if old in KEYS_REPLACED:
            raise ConfigError(f"{old}: unknown key; {old} was replaced: write {KEYS_REPLACED[old]}")
        raise ConfigError(f"{old}: unknown key (known: {', '.join(sorted(names))})")
    kwargs = {name: _convert(hints[name], raw[name], f"{prefix}{name}") for name in raw}
    try:
        return cls(**kwargs)
    except ConfigError as e:
        raise ConfigError(str(e)) from None


def _convert(tp: Any, value: Any, key: str) -> Any:
    origin = typing.get_origin(tp)
    if dataclasses.is_dataclass(tp):
        return _build(tp, value, key + ".")
    if origin is dict:
        ktp, vtp = typing.get_args(tp)
        _require(isinstance(value, dict), key, "a table", value)
        return {str(k): _convert(vtp, v, f"{key}.{k}") for k, v in value.items()}
    if origin in (list, tuple):
        (etp, *_) = typing.get_args(tp)
        _require(isinstance(value, (list, tuple)), key, "a list", value)
        items = [_convert(etp, v, f"{key}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        for arg in args:
            if typing.get_origin(arg) is Literal:  # a choice among other types: check it here
                if value in typing.get_args(arg):
                    return value
            elif arg is not type(None):
                try:
                    return _convert(arg, value, key)
                except ConfigError:
                    pass
        _require(False, key, describe(tp), value)
    if tp is bool:
        _require(isinstance(value, bool), key, "true or false", value)
    elif tp is int:
        _require(isinstance(value, int) and not isinstance(value, bool), key, "an integer", value)
    elif tp is float:
        _require(isinstance(value, (int, float)) and not isinstance(value, bool), key, "a number", value)
        _require(math.isfinite(value), key, "a finite number", value)
        return float(value)
    elif tp is str:
        _require(isinstance(value, str), key, "a string", value)
    return value
