"""The agent's side of an episode: tool calls parsed from model turns, the tools themselves, and
their results rendered back into tokens. The episode runner (`tempering.rollout`) drives it."""

from tempering.agent.parsers import PARSERS, get_parser
from tempering.agent.tools import TOOLS, execute, tool_schemas

__all__ = ["PARSERS", "get_parser", "TOOLS", "execute", "tool_schemas"]
