"""The OpenAI wire format for `tempering serve`: request bodies in, response bodies out.

Parses and validates /v1/completions and /v1/chat/completions bodies into prompts and
`SamplingParams` (`ApiError` with an HTTP status for anything wrong), and builds the JSON of
responses and of streamed chunks. It holds no engine and does no I/O. As in vLLM, a completions
text prompt is encoded by the engine with the tokenizer's special tokens (its BOS); chat messages
become token ids here: rendered with the chat template, which writes its own BOS, and encoded
without adding specials again.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any

from tempering.engine.outputs import CompletionOutput
from tempering.engine.sampling_params import SamplingParams
from tempering.records import Message

_KNOWN = {"model", "prompt", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "top_k",
          "n", "stream", "stop", "seed", "logprobs", "echo", "user", "stream_options", "ignore_eos",
          "presence_penalty", "frequency_penalty"}


class ApiError(Exception):
    def __init__(self, status: int, message: str, kind: str = "invalid_request_error"):
        super().__init__(message)
        self.status, self.message, self.kind = status, message, kind

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.kind, "param": None, "code": self.status}}


@dataclass
class ApiRequest:
    chat: bool
    prompts: list[Any]  # text or token-id lists; one entry per prompt (chat: the rendered ids)
    params: SamplingParams
    stream: bool
    logprobs: bool
    id: str
    created: int


def parse(body: Any, chat: bool, tokenizer, max_sequences: int = 256) -> ApiRequest:
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    unknown = sorted(set(body) - _KNOWN)
    if unknown:
        raise ApiError(400, f"unsupported fields {unknown}")
    if body.get("echo"):
        raise ApiError(400, "echo is not supported")
    for penalty in ("presence_penalty", "frequency_penalty"):
        if body.get(penalty, 0):
            raise ApiError(400, f"{penalty} is not supported (only 0)")
    prompts = [_chat_prompt(body.get("messages"), tokenizer)] if chat else _prompts(body.get("prompt"))
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
                            f"{max_sequences} sequences (engine.max_request_sequences)")
    kind = "chatcmpl" if chat else "cmpl"
    return ApiRequest(chat, prompts, params, bool(body.get("stream", False)), bool(body.get("logprobs")),
                      f"{kind}-{uuid.uuid4().hex[:24]}", int(time.time()))


def _prompts(prompt: Any) -> list[Any]:
    if isinstance(prompt, str) and prompt:
        return [prompt]
    if isinstance(prompt, list) and prompt:
        if all(isinstance(t, int) for t in prompt):
            return [prompt]
        if all(isinstance(p, str) and p for p in prompt) or all(
                isinstance(p, list) and p and all(isinstance(t, int) for t in p) for p in prompt):
            return list(prompt)
    raise ApiError(400, "prompt must be a non-empty string, a list of token ids, or a list of either")


def _chat_prompt(messages: Any, tokenizer) -> list[int]:
    if not isinstance(messages, list) or not messages:
        raise ApiError(400, "messages must be a non-empty list")
    parsed = []
    for m in messages:
        if not (isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)):
            raise ApiError(400, "each message needs a string role and a string content")
        parsed.append(Message(m["role"], m["content"]))
    if tokenizer.chat_template:
        return tokenizer.encode_prompt("", parsed)
    # No template (tiny demo models): a plain transcript that ends where the assistant speaks,
    # encoded as any plain prompt (with the BOS the tokenizer adds, as in training).
    return tokenizer.encode_prompt("".join(f"{m.role}: {m.content}\n" for m in parsed) + "assistant: ")


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
    out: dict[str, Any] = {"index": index, "finish_reason": c.finish_reason,
                           "logprobs": _logprobs(c, tokenizer) if req.logprobs else None}
    if req.chat:
        out["message"] = {"role": "assistant", "content": c.text}
    else:
        out["text"] = c.text
    return out


def response(req: ApiRequest, model: str, choices: list[dict], prompt_tokens: int, completion_tokens: int) -> dict:
    return {"id": req.id, "object": "chat.completion" if req.chat else "text_completion", "created": req.created,
            "model": model, "choices": choices,
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens}}


def chunk(req: ApiRequest, model: str, index: int, text: str, finish_reason: str | None, first: bool) -> dict:
    if req.chat:
        delta: dict[str, Any] = {"role": "assistant"} if first else {}
        if text:
            delta["content"] = text
        body: dict[str, Any] = {"index": index, "delta": delta, "finish_reason": finish_reason}
    else:
        body = {"index": index, "text": text, "finish_reason": finish_reason}
    return {"id": req.id, "object": "chat.completion.chunk" if req.chat else "text_completion",
            "created": req.created, "model": model, "choices": [body]}
