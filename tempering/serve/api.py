"""The OpenAI wire format for `tempering serve`: request bodies in, response bodies out.

Parses and validates /v1/completions and /v1/chat/completions bodies into prompts and
`SamplingParams` (`ApiError` with an HTTP status for anything wrong), and builds the JSON of
responses and of streamed chunks. It holds no engine and does no I/O. As in vLLM, a completions
text prompt is encoded by the engine with the tokenizer's special tokens (its BOS); chat messages
become token ids here: rendered with the chat template (with the request's tools, assistant
tool calls and tool results), which writes its own BOS, and encoded without adding specials
again. Function calling's own rules are `tool_calls`'.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass

from tempering.engine.outputs import CompletionOutput
from tempering.engine.sampling_params import SamplingParams
from tempering.jsonvalue import JSON, JSONObject
from tempering.records import Message, ToolCall
from tempering.serve import tool_calls
from tempering.serve.tool_calls import CallScanner, ServedCall, ToolChoice, ToolsError

_KNOWN = {"model", "prompt", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "top_k",
          "n", "stream", "stop", "seed", "logprobs", "echo", "user", "stream_options", "ignore_eos",
          "presence_penalty", "frequency_penalty"}
_CHAT_ONLY = {"tools", "tool_choice", "parallel_tool_calls"}
_ROLES = {"system", "developer", "user", "assistant", "tool"}


class ApiError(Exception):
    """An answer other than 200, in OpenAI's error shape; `retry_after` (seconds) for 429 and 503."""

    def __init__(self, status: int, message: str, kind: str = "invalid_request_error", code: str | None = None,
                 retry_after: float | None = None):
        super().__init__(message)
        self.status, self.message, self.kind, self.code, self.retry_after = status, message, kind, code, retry_after

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.kind, "param": None, "code": self.code or self.status}}


@dataclass
class ApiRequest:
    chat: bool
    prompts: list[str | list[int]]  # text or token-id lists; one entry per prompt (chat: the rendered ids)
    params: SamplingParams
    stream: bool
    logprobs: bool
    id: str
    created: int
    model: str | None = None  # as the client named it (None: not named)
    tools: ToolChoice | None = None  # chat with tools offered
    tool_format: str = "hermes"  # how the model writes calls: "hermes" or "compact"
    prefix: str = ""  # the start of the model's turn that tool_choice forces (its tokens end the prompt)

    def scanner(self) -> CallScanner | None:
        """A reader of one choice's text into content and calls; None when calls are not parsed."""
        if self.tools is None or self.tools.mode == "none":
            return None
        scanner = CallScanner(self.tools, self.tool_format)
        scanner.feed(self.prefix)  # the forced start of the turn is part of what the model wrote
        return scanner


def parse(body: JSON, chat: bool, tokenizer, max_sequences: int = 256, tool_format: str = "hermes") -> ApiRequest:
    """`tool_format`: how the served model writes tool calls ("hermes" or "compact")."""
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    unknown = sorted(set(body) - _KNOWN - (_CHAT_ONLY if chat else set()))
    if unknown:
        raise ApiError(400, f"unsupported fields {unknown}")
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise ApiError(400, f"model must be a string, got {model!r}")
    if body.get("echo"):
        raise ApiError(400, "echo is not supported")
    for penalty in ("presence_penalty", "frequency_penalty"):
        if body.get(penalty, 0):
            raise ApiError(400, f"{penalty} is not supported (only 0)")
    try:
        tools = tool_calls.parse_tool_choice(body) if chat else None
    except ToolsError as e:
        raise ApiError(400, str(e)) from None
    forced = tool_calls.prefix(tools, tool_format)
    prompts = ([_chat_prompt(body.get("messages"), tokenizer, tools, tool_format) + _encode(tokenizer, forced)]
               if chat else _prompts(body.get("prompt")))
    stop = body.get("stop") or ()
    stop = (stop,) if isinstance(stop, str) else stop
    if not isinstance(stop, (list, tuple)) or not all(isinstance(x, str) and x for x in stop):
        raise ApiError(400, "stop must be a non-empty string or a list of them")
    default_max = 16 if not chat else 256
    try:
        params = SamplingParams(
            n=_int(body, "n", 1), temperature=_num(body, "temperature", 1.0), top_p=_num(body, "top_p", 1.0),
            top_k=_int(body, "top_k", 0), seed=_int(body, "seed", None),
            max_tokens=_int(body, "max_completion_tokens", _int(body, "max_tokens", default_max)),
            stop=tuple(stop), ignore_eos=bool(body.get("ignore_eos", False)))
    except ValueError as e:
        raise ApiError(400, str(e)) from None
    if len(prompts) * params.n > max_sequences:
        # One request must not monopolise the engine: n x prompts is bounded like a batch.
        raise ApiError(400, f"{len(prompts)} prompt(s) x n={params.n} asks for more than "
                            f"{max_sequences} sequences (serve.max_request_sequences)")
    kind = "chatcmpl" if chat else "cmpl"
    return ApiRequest(chat, prompts, params, bool(body.get("stream", False)), bool(body.get("logprobs")),
                      f"{kind}-{uuid.uuid4().hex[:24]}", int(time.time()), model, tools, tool_format, forced)


def _prompts(prompt: JSON) -> list[str | list[int]]:
    if isinstance(prompt, str) and prompt:
        return [prompt]
    if isinstance(prompt, list) and prompt:
        if all(isinstance(t, int) for t in prompt):
            return [prompt]
        if all(isinstance(p, str) and p for p in prompt) or all(
                isinstance(p, list) and p and all(isinstance(t, int) for t in p) for p in prompt):
            return list(prompt)
    raise ApiError(400, "prompt must be a non-empty string, a list of token ids, or a list of either")


def _chat_prompt(messages: JSON, tokenizer, tools: ToolChoice | None, fmt: str) -> list[int]:
    parsed = chat_messages(messages)
    if tokenizer.chat_template:
        return tokenizer.encode_prompt("", parsed, list(tools.schemas) if tools is not None else None)
    # No template (tiny demo models): a plain transcript that ends where the assistant speaks,
    # encoded as any plain prompt (with the BOS the tokenizer adds, as in training); an
    # assistant's calls are written as the compact format writes them.
    params = tools.params if tools is not None else {}
    lines = [f"{m.role}: " + (m.content + "".join(tool_calls.compact_text(c, params.get(c.name, ()))
                                                    for c in m.tool_calls)) for m in parsed]
    return tokenizer.encode_prompt("".join(f"{x}\n" for x in lines) + "assistant: ")


def _encode(tokenizer, text: str) -> list[int]:
    return tokenizer.encode(text) if text else []


def chat_messages(messages: JSON) -> list[Message]:
    """OpenAI chat messages -> `Message`s: text content (a string or text parts), an assistant's
    `tool_calls`, a tool message's `tool_call_id`. ApiError 400 naming the message otherwise."""
    if not isinstance(messages, list) or not messages:
        raise ApiError(400, "messages must be a non-empty list")
    return [_message(m, f"messages[{i}]") for i, m in enumerate(messages)]


def _message(m: JSON, where: str) -> Message:
    if not isinstance(m, dict) or m.get("role") not in _ROLES:
        raise ApiError(400, f"{where}: each message needs a role ({', '.join(sorted(_ROLES))}) and a string content")
    role, calls = m["role"], m.get("tool_calls") or []
    content = _content(m.get("content"), where, may_be_empty=role == "assistant" and bool(calls))
    if calls and role != "assistant":
        raise ApiError(400, f"{where}: only assistant messages carry tool_calls")
    if not isinstance(calls, list):
        raise ApiError(400, f"{where}.tool_calls must be a list")
    parsed = tuple(_assistant_call(c, f"{where}.tool_calls[{j}]") for j, c in enumerate(calls))
    call_id = m.get("tool_call_id", "")
    if role == "tool" and (not isinstance(call_id, str) or not call_id):
        raise ApiError(400, f"{where}: a tool message needs the tool_call_id of the call it answers")
    return Message("system" if role == "developer" else role, content, parsed, call_id if role == "tool" else "")


def _content(content: JSON, where: str, may_be_empty: bool) -> str:
    if content is None and may_be_empty:
        return ""
    if isinstance(content, list):  # content parts: only text ones are understood
        if all(isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str) for p in content):
            return "".join(p["text"] for p in content)
        raise ApiError(400, f"{where}.content: only text parts are supported")
    if not isinstance(content, str):
        raise ApiError(400, f"{where}: each message needs a string role and a string content")
    return content


def _assistant_call(c: JSON, where: str) -> ToolCall:
    fn = c.get("function") if isinstance(c, dict) else None
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
        raise ApiError(400, f"{where}: expected {{\"id\": ..., \"type\": \"function\", \"function\": "
                            "{\"name\": ..., \"arguments\": \"{...}\"}}")
    try:
        args = tool_calls.call_arguments(fn.get("arguments", "{}"), f"{where}.function.arguments")
    except ToolsError as e:
        raise ApiError(400, str(e)) from None
    return ToolCall(fn["name"], args, id=str(c.get("id", "")))


def _int(body: dict, key: str, default: int | None) -> int | None:
    v = body.get(key, default)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, int):
        raise ApiError(400, f"{key} must be an integer, got {v!r}")
    return v


def _num(body: dict, key: str, default: float) -> float:
    v = body.get(key, default)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ApiError(400, f"{key} must be a number, got {v!r}")
    return float(v)


def _logprobs(c: CompletionOutput, tokenizer) -> dict:
    return {"tokens": [tokenizer.decode([t]) for t in c.token_ids], "token_logprobs": c.logprobs,
            "token_ids": c.token_ids}


def choice(req: ApiRequest, index: int, c: CompletionOutput, tokenizer) -> dict:
    out: JSONObject = {"index": index, "finish_reason": c.finish_reason,
                           "logprobs": _logprobs(c, tokenizer) if req.logprobs else None}
    if not req.chat:
        out["text"] = c.text
        return out
    scanner = req.scanner()
    if scanner is None:
        out["message"] = {"role": "assistant", "content": c.text}
        return out
    pieces = scanner.feed(c.text) + scanner.finish()
    text = "".join(p for p in pieces if isinstance(p, str))
    out["message"] = {"role": "assistant", "content": text if text or not scanner.calls else None}
    if scanner.calls:
        out["message"]["tool_calls"] = [call.wire() for call in scanner.calls]
        out["finish_reason"] = finish_reason(c.finish_reason, True)
    return out


def finish_reason(engine_reason: str | None, called: bool) -> str | None:
    """A turn that ended by itself after making calls ends with "tool_calls", as OpenAI's do."""
    return "tool_calls" if called and engine_reason == "stop" else engine_reason


def fingerprint(version: int) -> str:
    """The policy version served, where OpenAI's responses name the backend's configuration."""
    return f"tempering-v{version}"


def response(req: ApiRequest, model: str, choices: list[dict], prompt_tokens: int, completion_tokens: int,
             version: int) -> dict:
    return {"id": req.id, "object": "chat.completion" if req.chat else "text_completion", "created": req.created,
            "model": model, "system_fingerprint": fingerprint(version), "choices": choices,
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens}}


def stream_chunks(req: ApiRequest, model: str, version: int, index: int, text: str, first: bool,
                  scanner: CallScanner | None, end: str | None = None) -> list[dict]:
    """The chunks new `text` of choice `index` makes: content, tool calls as the scanner finds
    them, and with `end` (its finish reason; the choice is done) the last one. `first`: nothing
    of this choice was sent yet (its first chunk names the role)."""
    done = end is not None
    pieces = [text] if scanner is None else scanner.feed(text) + (scanner.finish() if done else [])
    out: list[dict] = []
    for p in pieces:
        if isinstance(p, str):
            if p:
                out.append(chunk(req, model, version, index, p, None, first and not out))
        else:
            out.append(chunk(req, model, version, index, "", None, first and not out, call=p))
            out.append(chunk(req, model, version, index, "", None, False, call=p, arguments=True))
    if done:
        called = scanner is not None and bool(scanner.calls)
        out.append(chunk(req, model, version, index, "", finish_reason(end, called), first and not out))
    elif first and not out:
        out.append(chunk(req, model, version, index, "", None, True))
    return out


def chunk(req: ApiRequest, model: str, version: int, index: int, text: str, finish_reason: str | None,
          first: bool, call: ServedCall | None = None, arguments: bool = False) -> dict:
    """One streamed chunk of choice `index`: text, or a tool call (its id and name, or with
    `arguments`, its arguments), or the end (`finish_reason`)."""
    if req.chat:
        delta: JSONObject = {"role": "assistant"} if first else {}
        if text:
            delta["content"] = text
        if call is not None:
            fn = {"arguments": call.arguments} if arguments else {"name": call.name, "arguments": ""}
            head = {} if arguments else {"id": call.id, "type": "function"}
            delta["tool_calls"] = [{"index": call.index, **head, "function": fn}]
        body: JSONObject = {"index": index, "delta": delta, "finish_reason": finish_reason}
    else:
        body = {"index": index, "text": text, "finish_reason": finish_reason}
    return {"id": req.id, "object": "chat.completion.chunk" if req.chat else "text_completion",
            "created": req.created, "model": model, "system_fingerprint": fingerprint(version), "choices": [body]}
