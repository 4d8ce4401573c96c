"""Function calling on the served chat API, as OpenAI's and vLLM's: the request's `tools`,
`tool_choice` and `parallel_tool_calls`, and a turn's text split into content and tool calls.

`parse_tool_choice` checks the request's fields (`ApiError` 400 naming the field). The tools go
to the chat template as they are (it prints them, as in training). `tool_choice` "required" or a
named function is kept by starting the model's turn with the beginning of a call (`prefix`:
`<tool_call>` for hermes, `$` for compact, with the function's name when one is named); the
text parsed is that prefix and what follows. `CallScanner` reads the turn as it streams, with
the agent loop's parsers (`agent.parsers`): hermes blocks one by one as they close, compact
once the turn ends. A call that does not parse, or names a function the request did not offer,
stays in the content as the model wrote it: malformed output is never an error. With
`parallel_tool_calls` false, calls after the first are dropped. Content is the text outside the
calls, stripped at both ends, the same streamed or not.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass
from typing import Literal

from tempering.agent.parsers import COMPACT_MARK, compact, hermes
from tempering.agent.tools import bind_arguments
from tempering.jsonvalue import JSON, JSONObject
from tempering.tasks.host import Param, Tool, ToolError, ToolHost
from tempering.records import Budget, ToolCall

OPEN, CLOSE = "<tool_call>", "</tool_call>"
_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


class ToolsError(ValueError):
    """A request's tools or tool_choice that cannot be used (the API answers 400)."""


@dataclass(frozen=True)
class ToolChoice:
    """What a chat request asks of function calling. `params`: each function's parameter names
    in its schema's order (compact calls give their arguments by position)."""

    schemas: tuple[dict, ...]  # the request's tools, as the chat template prints them
    params: dict[str, tuple[str, ...]]
    mode: Literal["auto", "none", "required", "function"] = "auto"
    name: str = ""  # mode "function": the function named
    parallel: bool = True


@dataclass(frozen=True)
class ServedCall:
    index: int  # its place among the turn's calls
    id: str
    name: str
    arguments: str  # a JSON object, as OpenAI sends it

    def wire(self) -> dict:
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}


def parse_tool_choice(body: dict) -> ToolChoice | None:
    """The request's function calling; None when it offers no tools."""
    tools, choice, parallel = body.get("tools"), body.get("tool_choice"), body.get("parallel_tool_calls", True)
    if not isinstance(parallel, bool):
        raise ToolsError(f"parallel_tool_calls must be true or false, got {parallel!r}")
    if not tools:
        if choice not in (None, "none"):
            raise ToolsError("tool_choice needs tools")
        return None
    if not isinstance(tools, list):
        raise ToolsError("tools must be a list of {\"type\": \"function\", \"function\": {...}}")
    params: dict[str, tuple[str, ...]] = {}
    for i, tool in enumerate(tools):
        name, names = _function(tool, f"tools[{i}]")
        if name in params:
            raise ToolsError(f"tools[{i}]: function {name!r} is offered twice")
        params[name] = names
    mode, named = _choice(choice, params)
    return ToolChoice(tuple(tools), params, mode, named, parallel)


def _function(tool: JSON, where: str) -> tuple[str, tuple[str, ...]]:
    fn = tool.get("function") if isinstance(tool, dict) else None
    if not isinstance(tool, dict) or tool.get("type") != "function" or not isinstance(fn, dict):
        raise ToolsError(f"{where}: expected {{\"type\": \"function\", \"function\": {{\"name\": ...}}}}")
    name = fn.get("name")
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ToolsError(f"{where}.function.name must be 1-64 letters, digits, '_' or '-', got {name!r}")
    schema = fn.get("parameters", {})
    props = schema.get("properties", {}) if isinstance(schema, dict) else None
    if not isinstance(props, dict):
        raise ToolsError(f"{where}.function.parameters must be a JSON schema object with \"properties\"")
    return name, tuple(props)


def _choice(choice: JSON, params: dict[str, tuple[str, ...]]) -> tuple[str, str]:
    if choice is None:
        return "auto", ""
    if choice in ("auto", "none", "required"):
        return choice, ""
    fn = choice.get("function") if isinstance(choice, dict) else None
    name = fn.get("name") if isinstance(fn, dict) else None
    if not isinstance(choice, dict) or choice.get("type") != "function" or not isinstance(name, str):
        raise ToolsError("tool_choice must be \"auto\", \"none\", \"required\" or "
                         "{\"type\": \"function\", \"function\": {\"name\": ...}}")
    if name not in params:
        raise ToolsError(f"tool_choice names function {name!r}, which is not in tools")
    return "function", name


def prefix(choice: ToolChoice | None, fmt: str) -> str:
    """The text the model's turn is made to start with, so that it calls a tool (or the named one)."""
    if choice is None or choice.mode not in ("required", "function"):
        return ""
    if fmt == "compact":
        return COMPACT_MARK + (f"{choice.name} " if choice.mode == "function" else "")
    return OPEN + "\n" + (f'{{"name": "{choice.name}", "arguments": ' if choice.mode == "function" else "")


def call_arguments(raw: JSON, where: str) -> JSONObject:
    """An assistant message's `function.arguments` (a JSON object, as text or as an object)."""
    if isinstance(raw, str):
        try:
            raw = json.loads(raw) if raw.strip() else {}
        except json.JSONDecodeError as e:
            raise ToolsError(f"{where} is not valid JSON: {e.msg}") from None
    if not isinstance(raw, dict):
        raise ToolsError(f"{where} must be a JSON object")
    return raw


def compact_text(call: ToolCall, params: tuple[str, ...]) -> str:
    """An assistant's call as the compact format writes it: `$name first`, then the others on lines."""
    values = [str(call.arguments.get(p, "")) for p in params] or [str(v) for v in call.arguments.values()]
    first, rest = (values[0], values[1:]) if values else ("", [])
    return "\n".join([f"{COMPACT_MARK}{call.name} {first}".rstrip(), *rest])


class CallScanner:
    """One choice's text, fed as it streams -> content pieces (str) and calls (ServedCall)."""

    def __init__(self, choice: ToolChoice, fmt: str):
        self.choice, self.fmt = choice, fmt
        self.calls: list[ServedCall] = []
        self._pending = ""
        self._in_call = False  # hermes: inside an open <tool_call>
        self._compact: str | None = None  # compact: "call" or "content" once the turn's first character is seen
        self._space = ""  # whitespace held until content follows it
        self._started = False

    def feed(self, text: str) -> list[str | ServedCall]:
        self._pending += text
        return self._hermes() if self.fmt == "hermes" else self._compact_feed()

    def finish(self) -> list[str | ServedCall]:
        """The rest, once the turn has ended: an unclosed call is content."""
        out: list[str | ServedCall] = []
        if self.fmt == "compact" and self._compact == "call":
            out = self._compact_call(self._pending)
        else:
            out = self._content(self._pending)
        self._pending, self._space = "", ""
        return out

    def _hermes(self) -> list[str | ServedCall]:
        out: list[str | ServedCall] = []
        while True:
            if not self._in_call:
                i = self._pending.find(OPEN)
                if i < 0:  # hold back what could be the start of a tag
                    keep = next((k for k in range(len(OPEN) - 1, 0, -1) if self._pending.endswith(OPEN[:k])), 0)
                    cut = len(self._pending) - keep
                    out += self._content(self._pending[:cut])
                    self._pending = self._pending[cut:]
                    return out
                out += self._content(self._pending[:i])
                self._pending, self._in_call = self._pending[i:], True
            j = self._pending.find(CLOSE)
            if j < 0:
                return out
            block, self._pending = self._pending[:j + len(CLOSE)], self._pending[j + len(CLOSE):]
            self._in_call = False
            out += self._take(hermes(block), block)

    def _compact_feed(self) -> list[str | ServedCall]:
        if self._compact is None:
            head = self._pending.lstrip()
            if not head:
                return []
            self._compact = "call" if head.startswith(COMPACT_MARK) else "content"
        if self._compact == "call":
            return []  # a compact call is the whole turn: read once it ends
        out, self._pending = self._content(self._pending), ""
        return out

    def _compact_call(self, text: str) -> list[str | ServedCall]:
        calls = compact(text)
        if calls and not calls[0].error and calls[0].name in self.choice.params:
            names = self.choice.params[calls[0].name]
            tool = Tool(calls[0].name, "", tuple(Param(n, "") for n in names), _never)
            try:
                calls = [ToolCall(calls[0].name, bind_arguments(tool, calls[0].arguments))]
            except ToolError:
                calls = []
        return self._take(calls, text)

    def _take(self, calls: list[ToolCall], raw: str) -> list[str | ServedCall]:
        """A parsed block: its call, or its text as content when it is not a call of the request's."""
        if len(calls) != 1 or calls[0].error or calls[0].name not in self.choice.params:
            return self._content(raw)
        if self.calls and not self.choice.parallel:
            return []
        call = ServedCall(len(self.calls), f"call_{uuid.uuid4().hex[:24]}", calls[0].name,
                          json.dumps(dict(calls[0].arguments), ensure_ascii=False))
        self.calls.append(call)
        return [call]

    def _content(self, text: str) -> list[str | ServedCall]:
        text, self._space = self._space + text, ""
        body = text.rstrip()
        self._space = text[len(body):]
        if not self._started:
            body = body.lstrip()
        if not body:
            return []
        self._started = True
        return [body]


def _never(args: dict[str, str], host: ToolHost, budget: Budget, turn: int) -> tuple[str, None]:
    raise AssertionError("a served tool call is carried out by the client, not here")
