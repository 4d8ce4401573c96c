"""Tools with a chat template that does not print them (SmolLM2's plain ChatML): the schemas go
in the system turn in the hermes form, and what the model is told to write parses back."""

from __future__ import annotations

import json

from tokenizer_builders import QWEN2_CONFIG, QWEN25_CONFIG, qwen2_style, write_folder

from tempering.agent.parsers import hermes
from tempering.records import Message, ToolCall
from tempering.tokenizer import load_tokenizer, with_tool_schemas

TOOLS = [{"type": "function", "function": {"name": "read_page", "description": "one page of the report",
                                           "parameters": {"type": "object", "properties": {"page": {"type": "integer"}}}}}]


def _tokenizer(tmp_path, config):
    return load_tokenizer(write_folder(tmp_path / "tok", qwen2_style(), config))


def test_a_template_without_tools_gets_their_schemas_in_the_system_turn(tmp_path):
    tok = _tokenizer(tmp_path, QWEN2_CONFIG)
    text = tok.render("", [Message("user", "What was revenue?")], TOOLS)
    system, user = text.split("<|im_end|>\n")[:2]
    assert system.startswith("<|im_start|>system\n") and "You are a helpful assistant." not in text
    schemas = system.split("<tools>\n")[1].split("\n</tools>")[0]
    assert [json.loads(line) for line in schemas.splitlines()] == TOOLS
    assert user == "<|im_start|>user\nWhat was revenue?" and text.endswith("<|im_start|>assistant\n")
    # a system message of the task's own keeps its text, the tools after it
    own = tok.render("", [Message("system", "Be brief."), Message("user", "q")], TOOLS)
    assert own.startswith("<|im_start|>system\nBe brief.\n\nYou can call functions") and own.count("<|im_start|>system") == 1
    # without tools nothing changes
    assert tok.render("", [Message("user", "q")], None) == tok.render("", [Message("user", "q")], [])
    assert "<tools>" not in tok.render("", [Message("user", "q")], None)


def test_calls_written_as_told_parse_back_and_earlier_calls_render_as_text(tmp_path):
    tok = _tokenizer(tmp_path, QWEN2_CONFIG)
    call = ToolCall(id="c1", name="read_page", arguments={"page": 3})
    messages = [Message("user", "q"), Message("assistant", "Let me look.", (call,)), Message("tool", "page 3 text", (), "c1")]
    text = tok.render("", messages, TOOLS)
    turn = text.split("<|im_start|>assistant\n")[1].split("<|im_end|>")[0]
    parsed = hermes(turn)
    assert [(c.name, dict(c.arguments)) for c in parsed] == [("read_page", {"page": 3})]
    assert turn.startswith("Let me look.") and "<|im_start|>tool\npage 3 text<|im_end|>" in text
    assert with_tool_schemas(messages, TOOLS)[3] == Message("tool", "page 3 text", (), "c1")


def test_a_template_that_prints_tools_is_left_to_do_so(tmp_path):
    tok = _tokenizer(tmp_path, QWEN25_CONFIG)
    messages = [Message("user", "q")]
    text = tok.render("", messages, TOOLS)
    assert "You can call functions" not in text and "read_page" in text
    assert text == tok._template().render(messages=[{"role": "user", "content": "q"}], tools=TOOLS,
                                          add_generation_prompt=True, bos_token="", eos_token="<|im_end|>")
