"""The config's keys are frozen in tests/config_fields.txt (every `section.key` with its type), so
that a new key, a removed one or a changed type is a decision written down in the same commit.
After such a change, rewrite the list with `.venv/bin/python tests/test_config_fields.py`.

Also the declared bounds themselves: the generic checker against hand-written expectations."""

from __future__ import annotations

import dataclasses
import sys
import types
import typing
from pathlib import Path
from typing import Annotated, Literal

import pytest

from tempering.config import Config, ConfigError, load_config
from tempering.config.checks import Each, Holds, Match, Range, check_fields

FROZEN = Path(__file__).with_name("config_fields.txt")


def type_text(tp: object) -> str:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is Literal:
        return f"Literal[{', '.join(map(repr, args))}]"
    if origin in (typing.Union, types.UnionType):
        return " | ".join(type_text(a) for a in args)
    if origin is tuple:
        return f"tuple[{type_text(args[0])}, ...]"
    if origin in (list, dict):
        return f"{origin.__name__}[{', '.join(type_text(a) for a in args)}]"
    if dataclasses.is_dataclass(tp):
        return "table"
    return tp.__name__ if isinstance(tp, type) else str(tp)


def field_list(cls: type = Config, prefix: str = "") -> list[str]:
    """`section.key type` for every key of the tree; tables of sections (`dict[str, Section]`)
    as `section.key.<name>.subkey`."""
    out = []
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        tp, key = hints[f.name], prefix + f.name
        value = typing.get_args(tp)[1] if typing.get_origin(tp) is dict else None
        if dataclasses.is_dataclass(tp):
            out += field_list(tp, key + ".")
            continue
        out.append(f"{key} {type_text(tp)}")
        if dataclasses.is_dataclass(value):
            out += field_list(value, key + ".<name>.")
    return out


def test_the_keys_are_the_frozen_list():
    now, frozen = field_list(), FROZEN.read_text().splitlines()
    added, removed = sorted(set(now) - set(frozen)), sorted(set(frozen) - set(now))
    assert not added and not removed, (
        f"config keys changed: added {added}, removed {removed}; if that is meant, rewrite the list with "
        f".venv/bin/python tests/test_config_fields.py (and make old configs' keys say where they went: "
        f"tempering.config.KEYS_REPLACED)")


def test_the_list_has_teeth():
    frozen = FROZEN.read_text().splitlines()
    assert "engine.max_batch_size int" in frozen and "serve.tenants.<name>.share float" in frozen
    assert "run.threads int | Literal['auto']" in frozen and len(frozen) > 150


def test_a_moved_key_names_where_it_went(tmp_path):
    path = tmp_path / "old.toml"
    path.write_text("[engine]\nrequest_timeout_s = 30.0\n")
    with pytest.raises(ConfigError) as e:
        load_config(path)
    assert str(e.value) == (f"{path}: engine.request_timeout_s: unknown key; engine.request_timeout_s was replaced: "
                            f"write serve.request_timeout_s")
    with pytest.raises(ConfigError, match="write serve.max_request_sequences$"):
        load_config(None, ["--engine.max_request_sequences=4"])
    cfg = load_config(None, ["--serve.request_timeout_s=30", "--serve.max_request_sequences=4"])
    assert (cfg.serve.request_timeout_s, cfg.serve.max_request_sequences) == (30.0, 4)


@dataclasses.dataclass(frozen=True)
class Example:
    count: Annotated[int, Range(ge=1)] = 1
    share: Annotated[float, Range(gt=0, le=1)] = 0.5
    cap: Annotated[float, Range(ge=1, zero="none")] = 0.0
    port: Annotated[int, Range(ge=-1, le=9, note="-1 = off")] = -1
    threads: Annotated[int | Literal["auto"], Range(ge=1)] = "auto"
    name: Annotated[str, Match(r"[a-z]+", "lowercase letters")] = "a"
    mode: Literal["x", "y"] = "x"
    flag: bool = False
    layers: Annotated[tuple[int, ...], Each(Range(ge=0))] = ()
    weights: Annotated[dict[Annotated[str, Match(r"\w+", "a word")], float], Holds(len, "at least one"),
                       Each(Range(gt=0, what="a weight"))] = dataclasses.field(default_factory=lambda: {"a": 1.0})

    def __post_init__(self) -> None:
        check_fields(self, "ex")


@pytest.mark.parametrize("kwargs, message", [
    ({"count": 0}, "ex.count: expected an integer >= 1, got 0"),
    ({"count": 2.0}, "ex.count: expected an integer, got 2.0"),
    ({"count": True}, "ex.count: expected an integer, got True"),
    ({"share": 0}, "ex.share: expected a number in (0, 1], got 0"),
    ({"share": 1.5}, "ex.share: expected a number in (0, 1], got 1.5"),
    ({"share": float("nan")}, "ex.share: expected a number, got nan"),
    ({"share": float("inf")}, "ex.share: expected a number, got inf"),
    ({"cap": 0.5}, "ex.cap: expected 0 (none) or a number >= 1, got 0.5"),
    ({"port": 10}, "ex.port: expected an integer in [-1, 9] (-1 = off), got 10"),
    ({"threads": 0}, "ex.threads: expected an integer >= 1 or 'auto', got 0"),
    ({"threads": "all"}, "ex.threads: expected an integer or 'auto', got 'all'"),
    ({"name": "A"}, "ex.name: expected lowercase letters, got 'A'"),
    ({"mode": "z"}, "ex.mode: expected one of 'x', 'y', got 'z'"),
    ({"flag": 1}, "ex.flag: expected true or false, got 1"),
    ({"layers": (0, -1)}, "ex.layers: expected an integer >= 0, got -1"),
    ({"weights": {}}, "ex.weights: expected at least one, got {}"),
    ({"weights": {"a-b": 1.0}}, "ex.weights.a-b: expected a word, got 'a-b'"),
    ({"weights": {"b": 0.0}}, "ex.weights.b: expected a weight > 0, got 0.0"),
    ({"weights": {"b": "1"}}, "ex.weights.b: expected a number, got '1'"),
])
def test_declared_bounds_name_the_key_the_expectation_and_the_value(kwargs, message):
    with pytest.raises(ConfigError) as e:
        Example(**kwargs)
    assert str(e.value) == message


def test_values_inside_the_bounds_pass():
    ok = Example(count=3, share=1, cap=0, port=9, threads=2, name="abc", mode="y", flag=True, layers=(0, 5),
                 weights={"b": 2})
    assert ok.share == 1 and Example(cap=1.0).cap == 1.0 and Example(port=-1).port == -1


def test_a_section_of_registry_names_says_unknown_and_what_replaced_an_old_value():
    @dataclasses.dataclass(frozen=True)
    class Names:
        loss: Literal["ppo", "gspo"] = "ppo"

        def __post_init__(self) -> None:
            check_fields(self, "algo", replaced={"loss": {"grpo": 'loss = "ppo"'}})

    with pytest.raises(ConfigError, match=r"^algo.loss: unknown 'grpo' \(known: gspo, ppo\); 'grpo' was replaced: "
                                          r"write loss = \"ppo\"$"):
        Names(loss="grpo")
    with pytest.raises(ConfigError, match=r"^algo.loss: unknown 'x' \(known: gspo, ppo\)$"):
        Names(loss="x")


if __name__ == "__main__":  # rewrite the frozen list
    FROZEN.write_text("\n".join(field_list()) + "\n")
    sys.exit(0)
