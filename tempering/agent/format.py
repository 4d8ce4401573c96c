"""`ToolFormat`: how an episode's tool calls are written and their results read back: a parser
(`agent.parsers`) and an observation renderer (`agent.observation`) chosen together by name."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from tempering.agent.observation import ObservationRenderer
from tempering.agent.parsers import get_parser
from tempering.records import ToolCall
from tempering.tokenizer import Tokenizer


@dataclass(frozen=True)
class ToolFormat:
    name: str
    parse: Callable[[str], list[ToolCall]]
    renderer: ObservationRenderer


def tool_format(name: str, tokenizer: Tokenizer) -> ToolFormat:
    """`name`: "hermes", "compact", or "auto" (hermes when the tokenizer has a chat template)."""
    if name == "auto":
        name = "hermes" if tokenizer.chat_template else "compact"
    return ToolFormat(name, get_parser(name), ObservationRenderer(tokenizer, chat=name == "hermes"))
