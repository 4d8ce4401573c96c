"""What `generate`, `step` and `abort` hand back: `RequestOutput` holding one `CompletionOutput`
per sample, with vLLM's field names and its streaming contract. Plain records; they own no
engine state and the engine never changes one after handing it out.

`step()` returns an output for every request that got a token in that step, finished or not.
Its completions are cumulative (`token_ids`, `logprobs`, `versions`: everything generated so
far, so each output's lists start with the previous one's), and a completion's `finish_reason`
is None until it finishes. `RequestOutput.finished` is True in exactly one output, the last:
after it the request is gone from the engine. `text` is decoded once, when the completion
finishes (stop strings cut); while it runs `text` is "", because decoding every running sequence
every step costs more than a step of a small model. Streaming clients decode the new tokens
themselves. `generate` collects only the finished outputs (and asks `step` for nothing else:
vLLM's FINAL_ONLY, since copying every running request's lists every step costs time
proportional to their length).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class CompletionOutput:
    index: int
    token_ids: list[int]
    logprobs: list[float]  # of each sampled token, temperature-scaled, before top-p/top-k
    versions: list[int]  # the policy version that produced each token
    text: str  # "" until finished
    finish_reason: str | None  # "stop" | "length" | "abort"; None while running

    def finished(self) -> bool:
        return self.finish_reason is not None


@dataclass
class RequestOutput:
    request_id: int
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput] = field(default_factory=list)
    finished: bool = False
