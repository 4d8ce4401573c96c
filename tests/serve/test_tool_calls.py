"""Function calling through the official `openai` client, on scripted policies (real decoders whose
weights make them emit given tool calls): calls round trip streamed and not, tool_choice forces
or forbids them, parallel_tool_calls, the compact format, and malformed calls come back as content."""

from __future__ import annotations

import json

import pytest
from serve_helpers import (AFTER_TOOL, AFTER_USER, ANSWER, TOOLS, WEATHER_CALL, chat_policy, client, openai, serving)

from tempering.config import ServeConfig
from tempering.models.scripted import scripted_policy
from tempering.records import Message, ToolCall

USER = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.fixture(scope="module")
def weather():
    """After the user: get_weather(Paris); after the tool's result: the answer."""
    model, tok = chat_policy([AFTER_USER, *WEATHER_CALL], [AFTER_TOOL, *ANSWER])
    with serving(model, tok) as srv:
        yield srv, tok


def streamed(c, **kw) -> tuple[str | None, list[dict], str, list]:
    """A streamed chat completion put back together: (content, calls, finish_reason, chunks)."""
    chunks = list(c.chat.completions.create(stream=True, **kw))
    content, calls, finish = None, {}, None
    for ch in chunks:
        choice = ch.choices[0]
        if choice.delta.content:
            content = (content or "") + choice.delta.content
        for d in choice.delta.tool_calls or []:
            call = calls.setdefault(d.index, {"id": None, "name": "", "arguments": ""})
            call["id"] = d.id or call["id"]
            call["name"] += (d.function.name or "") if d.function else ""
            call["arguments"] += (d.function.arguments or "") if d.function else ""
        finish = choice.finish_reason or finish
    return content, [calls[i] for i in sorted(calls)], finish, chunks


def test_a_tool_call_round_trips_through_the_openai_client(weather):
    srv, tok = weather
    c = client(srv)
    first = c.chat.completions.create(model="tiny", messages=USER, tools=TOOLS)
    msg = first.choices[0].message
    assert first.choices[0].finish_reason == "tool_calls" and msg.content is None
    (call,) = msg.tool_calls
    assert call.type == "function" and call.id.startswith("call_") and call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris"}
    # the prompt was the template's rendering of the conversation with the tools
    assert first.usage.prompt_tokens == len(tok.encode_prompt("", [Message("user", USER[0]["content"])], TOOLS))
    assert first.system_fingerprint == "tempering-v0"

    history = USER + [msg.model_dump(exclude_none=True), {"role": "tool", "tool_call_id": call.id, "content": "sunny"}]
    second = c.chat.completions.create(model="tiny", messages=history, tools=TOOLS)
    assert second.choices[0].message.content == "It is sunny in Paris." and not second.choices[0].message.tool_calls
    assert second.choices[0].finish_reason == "stop"
    rendered = [Message("user", USER[0]["content"]),
                Message("assistant", "", (ToolCall("get_weather", {"city": "Paris"}, id=call.id),)),
                Message("tool", "sunny", tool_call_id=call.id)]
    assert second.usage.prompt_tokens == len(tok.encode_prompt("", rendered, TOOLS))


def test_streamed_tool_calls_come_as_delta_tool_calls(weather):
    srv, _ = weather
    c = client(srv)
    content, calls, finish, chunks = streamed(c, model="tiny", messages=USER, tools=TOOLS)
    assert content is None and finish == "tool_calls" and chunks[0].choices[0].delta.role == "assistant"
    assert [(x["name"], json.loads(x["arguments"])) for x in calls] == [("get_weather", {"city": "Paris"})]
    assert calls[0]["id"].startswith("call_")
    history = USER + [{"role": "assistant", "content": None, "tool_calls": [
        {"id": calls[0]["id"], "type": "function", "function": {"name": "get_weather", "arguments": calls[0]["arguments"]}}]},
        {"role": "tool", "tool_call_id": calls[0]["id"], "content": "sunny"}]
    content, calls, finish, chunks = streamed(c, model="tiny", messages=history, tools=TOOLS)
    assert (content, calls, finish) == ("It is sunny in Paris.", [], "stop")
    assert len([ch for ch in chunks if ch.choices[0].delta.content]) == 2  # one chunk a token, as generated


def test_tool_choice_forces_or_forbids_a_call(weather):
    srv, _ = weather
    c = client(srv)
    # none: the call is not parsed; the model's text is the content
    out = c.chat.completions.create(model="tiny", messages=USER, tools=TOOLS, tool_choice="none")
    assert out.choices[0].message.content == "".join(WEATHER_CALL) and not out.choices[0].message.tool_calls
    assert out.choices[0].finish_reason == "stop"
    # after the tool's result the model answers; a named function (or required) makes it call again
    history = USER + [{"role": "assistant", "tool_calls": [{"id": "call_1", "type": "function", "function": {
        "name": "get_weather", "arguments": '{"city": "Paris"}'}}]}, {"role": "tool", "tool_call_id": "call_1",
                                                                     "content": "sunny"}]
    named = c.chat.completions.create(model="tiny", messages=history, tools=TOOLS,
                                      tool_choice={"type": "function", "function": {"name": "get_weather"}})
    (call,) = named.choices[0].message.tool_calls
    assert call.function.name == "get_weather" and json.loads(call.function.arguments) == {"city": "Paris"}
    # required, on the first turn: the forced start and the model's own continuation make one call
    content, calls, finish, _ = streamed(c, model="tiny", messages=USER, tools=TOOLS, tool_choice="required")
    assert content is None and finish == "tool_calls" and [x["name"] for x in calls] == ["get_weather"]


@pytest.mark.parametrize("tool_choice, parallel, expected", [
    ("auto", True, ["get_weather", "get_time"]), ("auto", False, ["get_weather"])])
def test_parallel_tool_calls(tool_choice, parallel, expected):
    model, tok = chat_policy([AFTER_USER, *WEATHER_CALL, "\n<tool_call>\n", '{"name": "get_time", "arguments": ',
                              '{"zone": "CET"}}\n</tool_call>'])
    with serving(model, tok) as srv:
        c = client(srv)
        out = c.chat.completions.create(model="tiny", messages=USER, tools=TOOLS, parallel_tool_calls=parallel)
        calls = out.choices[0].message.tool_calls
        assert [x.function.name for x in calls] == expected and len({x.id for x in calls}) == len(calls)
        assert out.choices[0].message.content is None
        _, streamed_calls, _, _ = streamed(c, model="tiny", messages=USER, tools=TOOLS, parallel_tool_calls=parallel)
        assert [x["name"] for x in streamed_calls] == expected


@pytest.mark.parametrize("call_text", [
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}\n</tool_call>',  # a brace short
    '<tool_call>\n{"name": "get_stock", "arguments": {}}\n</tool_call>',  # a function not offered
    '<tool_call>\n{"name": "get_weather", "arguments": {"city"',  # cut off before it closed
], ids=["broken-json", "unknown-function", "unclosed"])
def test_malformed_calls_come_back_as_plain_content(call_text):
    model, tok = chat_policy([AFTER_USER, "Let me look. ", call_text])
    with serving(model, tok) as srv:
        c = client(srv)
        out = c.chat.completions.create(model="tiny", messages=USER, tools=TOOLS)
        assert out.choices[0].message.content == "Let me look. " + call_text
        assert not out.choices[0].message.tool_calls and out.choices[0].finish_reason == "stop"
        content, calls, finish, _ = streamed(c, model="tiny", messages=USER, tools=TOOLS)
        assert (content, calls, finish) == ("Let me look. " + call_text, [], "stop")


def test_compact_calls_map_their_arguments_by_the_schema():
    """A character model without a chat template writes `$get_weather Paris` (the demo's format)."""
    model, tok = scripted_policy([[" ", "$get_weather Paris"]])  # the transcript ends "assistant: "
    with serving(model, tok, cfg=ServeConfig(tool_parser="compact")) as srv:
        out = client(srv).chat.completions.create(model="tiny", messages=USER, tools=TOOLS)
        (call,) = out.choices[0].message.tool_calls
        assert call.function.name == "get_weather" and json.loads(call.function.arguments) == {"city": "Paris"}


@pytest.mark.parametrize("body, words", [
    ({"tools": [{"type": "function", "function": {"name": "a b"}}]}, "tools[0].function.name"),
    ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "not in tools"),
    ({"tool_choice": "required"}, "tool_choice needs tools"),
    ({"tools": TOOLS, "parallel_tool_calls": "yes"}, "parallel_tool_calls"),
    ({"messages": USER + [{"role": "assistant", "tool_calls": [{"id": "x", "type": "function", "function": {
        "name": "get_weather", "arguments": "{not json"}}]}]}, "messages[1].tool_calls[0].function.arguments"),
    ({"messages": USER + [{"role": "tool", "content": "x"}]}, "tool_call_id"),
])
def test_bad_tool_fields_are_400s_naming_the_field(weather, body, words):
    with pytest.raises(openai.BadRequestError) as e:
        client(weather[0]).chat.completions.create(**{"model": "tiny", "messages": USER, **body})
    assert words in str(e.value)
