"""Tool-call parsers, chosen by name: the text of one assistant turn -> the calls it makes.

`hermes`: JSON objects in `<tool_call>...</tool_call>` tags, as the chat templates of
Qwen2.5 and Hermes models print them (`{"name": ..., "arguments": {...}}`, several per turn).
`compact`: one call per turn, `$name first-argument` with further arguments on the lines after,
short enough for the demo's character-level model to learn.

A turn with no call is the episode's final answer (an empty list). A call that cannot be read
(broken JSON, no name, arguments that are not an object) is still returned, with `error` set:
the model gets the error as its observation, and the metrics count it. Parsers never raise on
model output. Which tools exist and whether the arguments fit them is the tools' business.
"""

from __future__ import annotations

import json
import re
from typing import Callable

from tempering.errors import UserError
from tempering.records import ToolCall

Parser = Callable[[str], list[ToolCall]]

_HERMES = re.compile(r"<tool_call>(.*?)(</tool_call>|$)", re.S)


def hermes(text: str) -> list[ToolCall]:
    calls = []
    for body, closed in _HERMES.findall(text):
        if not closed:
            calls.append(_malformed("<tool_call> without </tool_call>"))
            continue
        try:
            obj = json.loads(body)
        except json.JSONDecodeError as e:
            calls.append(_malformed(f"not valid JSON ({e.msg} at character {e.pos})"))
            continue
        if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or not obj["name"]:
            calls.append(_malformed('a call is an object with a "name" and "arguments"'))
            continue
        args = obj.get("arguments", {})
        if isinstance(args, str):  # some models emit the arguments as a JSON string
            try:
                args = json.loads(args)
            except json.JSONDecodeError:
                pass
        if not isinstance(args, dict):
            calls.append(ToolCall(obj["name"], {}, error='"arguments" must be an object', error_kind="malformed"))
            continue
        calls.append(ToolCall(obj["name"], args))
    return calls


COMPACT_MARK = "$"


def compact(text: str) -> list[ToolCall]:
    """`$read notes.txt` -> read(notes.txt); `$write a.txt\\nline 1\\nline 2` -> write(a.txt,
    "line 1\\nline 2"). Arguments are positional: the rest of the first line, then each further
    line (the last one takes all remaining lines); the tool maps them to its parameters."""
    text = text.strip()
    if not text.startswith(COMPACT_MARK):
        return []
    head, _, rest = text[len(COMPACT_MARK):].partition("\n")
    name, _, first = head.strip().partition(" ")
    if not name:
        return [_malformed(f"{COMPACT_MARK} must be followed by a tool name")]
    args = [a for a in (first.strip(),) if a] + ([rest] if rest else [])
    return [ToolCall(name, {"_positional": args})]


def _malformed(why: str) -> ToolCall:
    return ToolCall("", {}, error=f"malformed tool call: {why}", error_kind="malformed")


PARSERS: dict[str, Parser] = {"hermes": hermes, "compact": compact}


def get_parser(name: str) -> Parser:
    if name not in PARSERS:
        raise UserError(f"unknown tool-call parser {name!r} (known: {', '.join(sorted(PARSERS))})")
    return PARSERS[name]
