"""`SamplingParams`: how to sample one request (vLLM's names and meanings), and where its stop
strings end a sample's text."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SamplingParams:
    n: int = 1
    temperature: float = 1.0  # 0 = greedy
    top_p: float = 1.0
    top_k: int = 0  # 0 = off
    max_tokens: int = 64
    seed: int | None = None
    stop: tuple[str, ...] = ()  # stop strings, excluded from the returned text
    stop_token_ids: tuple[int, ...] = ()  # in addition to the tokenizer's eos
    ignore_eos: bool = False

    def __post_init__(self) -> None:
        if self.n < 1:
            raise ValueError(f"SamplingParams.n must be >= 1, got {self.n}")
        if self.temperature < 0:
            raise ValueError(f"SamplingParams.temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"SamplingParams.top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise ValueError(f"SamplingParams.top_k must be >= 0, got {self.top_k}")
        if self.max_tokens < 1:
            raise ValueError(f"SamplingParams.max_tokens must be >= 1, got {self.max_tokens}")
        if isinstance(self.stop, str):
            object.__setattr__(self, "stop", (self.stop,))


def hit_stop(tokenizer, output_ids: list[int], stops: tuple[str, ...]) -> bool:
    """Whether the newest token completed one of the stop strings (only the tail can hold it)."""
    tail = max(len(x) for x in stops) + 8
    return any(x in tokenizer.decode(output_ids[-tail:]) for x in stops)


def final_text(tokenizer, output_ids: list[int], stops: tuple[str, ...]) -> str:
    """A finished sample's text, cut before the first stop string ("" without a tokenizer)."""
    if tokenizer is None:
        return ""
    text = tokenizer.decode(output_ids)
    for stop in stops:
        if stop in text:
            text = text[: text.index(stop)]
    return text
