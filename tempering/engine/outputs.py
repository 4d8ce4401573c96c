"""What `generate`, `step` and `abort` hand back: `RequestOutput` holding one `CompletionOutput`
per sample, with vLLM's field names. Plain records; they own no engine state."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class CompletionOutput:
    index: int
    token_ids: list[int]
    logprobs: list[float]  # of each sampled token, temperature-scaled, before top-p/top-k
    versions: list[int]  # the policy version that produced each token
    text: str
    finish_reason: str  # "stop" | "length" | "abort"


@dataclass
class RequestOutput:
    request_id: int
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput] = field(default_factory=list)
    finished: bool = True
