"""`ToolFormat`: how an episode's tool calls are written and their results read back: a parser
(`agent.parsers`), an observation renderer (`agent.observation`) and the writer of calls (for
references, which domains write in the compact form: `in_format`) chosen together by name."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from tempering.agent.observation import ObservationRenderer
from tempering.agent.parsers import compact, get_parser
from tempering.agent.tools import bind_arguments, tools_for
from tempering.tasks.host import ToolError
from tempering.records import Task, ToolCall
from tempering.tokenizer import Tokenizer, hermes_call


@dataclass(frozen=True)
class ToolFormat:
    name: str
    parse: Callable[[str], list[ToolCall]]
    renderer: ObservationRenderer

    def in_format(self, turn: str, task: Task) -> str:
        """A reference turn of `task` (calls in the compact form, `$read_page 1`) as this format
        writes it: the same call, its arguments named by the tool's parameters. A turn that
        calls nothing (the final answer) or names no tool of the task stays as it is."""
        calls = compact(turn) if self.name != "compact" else []
        tool = tools_for(task).get(calls[0].name) if calls else None
        if tool is None:
            return turn
        try:
            args = bind_arguments(tool, calls[0].arguments)
        except ToolError:
            return turn  # a deliberately bad reference call stays bad
        return hermes_call(ToolCall(tool.name, args))


def tool_format(name: str, tokenizer: Tokenizer) -> ToolFormat:
    """`name`: "hermes", "compact", or "auto" (hermes when the tokenizer has a chat template)."""
    if name == "auto":
        name = "hermes" if tokenizer.chat_template else "compact"
    return ToolFormat(name, get_parser(name), ObservationRenderer(tokenizer, chat=name == "hermes"))
