"""What the serving tests share: a ChatML-like chat template of our own that prints tools, tool
calls and tool results, scripted policies (`tempering.models.scripted`) that emit given tool
calls through it, a real server on port 0 around one, and the official `openai` client on it."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import pytest

from tempering.config import ServeConfig
from tempering.engine import LLM
from tempering.models.scripted import scripted_policy
from tempering.serve.server import Server
from tempering.serve.tenants import Tenants

sys.path.insert(0, str(Path(__file__).parents[1] / "sandbox"))  # its host-side process checks
from sandbox_helpers import host_cmdlines_containing, wait_until  # noqa: E402,F401

openai = pytest.importorskip("openai")

# Tools in the system turn, an assistant's calls in <tool_call> tags (hermes), results in a tool turn.
TEMPLATE = (
    "{% if tools %}<|im_start|>system\nTools:{% for t in tools %} {{ t | tojson }}{% endfor %}<|im_end|>\n{% endif %}"
    "{% for m in messages %}"
    "{% if m.role == 'tool' %}<|im_start|>tool\n<tool_response>{{ m.content }}</tool_response><|im_end|>\n"
    "{% elif m.tool_calls %}<|im_start|>assistant\n{% for c in m.tool_calls %}<tool_call>\n"
    "{{ {'name': c.function.name, 'arguments': c.function.arguments} | tojson }}\n</tool_call>{% endfor %}<|im_end|>\n"
    "{% else %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
SPECIALS = ["<|im_start|>", "<|im_end|>"]
# The last token of a prompt that asks for the assistant's turn: after a user message, and after
# tool results (the scripted tokenizer keeps each as one token, so a policy can tell them apart).
AFTER_USER = "<|im_start|>assistant\n"
AFTER_TOOL = "</tool_response><|im_end|>\n" + AFTER_USER
# get_weather(city=Paris), in pieces that end where tool_choice's forced prefixes end
WEATHER_CALL = ["<tool_call>\n", '{"name": "get_weather", "arguments": ', '{"city": "Paris"}}', "\n</tool_call>"]
ANSWER = ["It is sunny", " in Paris."]
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "The weather in a city.",
                                      "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                     "required": ["city"]}}},
    {"type": "function", "function": {"name": "get_time", "description": "The time in a zone.",
                                      "parameters": {"type": "object", "properties": {"zone": {"type": "string"}}}}},
]


def chat_policy(*chains: list[str]):
    """A scripted model with the chat template: each chain starts with AFTER_USER or AFTER_TOOL."""
    return scripted_policy(chains, specials=SPECIALS, eos="<|im_end|>", chat_template=TEMPLATE)


@contextlib.contextmanager
def serving(model, tok, name: str = "tiny", cfg: ServeConfig = ServeConfig(), api_keys: tuple[str, ...] = (),
            keys_file: str | None = None, source=None, **engine):
    """A started server of `model` on port 0 (closed after); `source`: weights it follows."""
    eng = LLM(model, tok, **{"max_seq_len": 2048, "max_batch_size": 16, **engine})
    srv = Server(eng, port=0, model_name=name, cfg=cfg, tenants=Tenants.load(cfg, api_keys, keys_file),
                 source=source).start()
    try:
        yield srv
    finally:
        srv.close()


def client(srv: Server, key: str = "unused", **kw) -> "openai.OpenAI":
    # No retries: a 429 must reach the test, not be waited out.
    return openai.OpenAI(base_url=f"http://127.0.0.1:{srv.server_address[1]}/v1", api_key=key, max_retries=0,
                         timeout=60, **kw)
