"""`LLM`: batched generation over the shared decoder, with per-token logprobs and versions.

`generate` expands each request into its n sequences, prefills each distinct prompt once, fans
the prompt's KV out to its samples, then decodes all sequences together, dropping finished ones
from the batch. `load_weights(state, version)` swaps the policy in place; every generated token
is tagged with the version that produced it. Paged KV, prefix caching across calls and
continuous batching are not in this first engine.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import torch

from tempering.engine.kv_cache import KVCache
from tempering.engine.sampler import sample
from tempering.engine.sampling_params import SamplingParams
from tempering.models import Decoder


@dataclass
class CompletionOutput:
    index: int
    token_ids: list[int]
    logprobs: list[float]
    versions: list[int]
    text: str
    finish_reason: str  # "stop" | "length"


@dataclass
class RequestOutput:
    request_id: int
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput] = field(default_factory=list)


@dataclass
class _Seq:
    request: int
    index: int
    prompt: list[int]
    params: SamplingParams
    generator: torch.Generator | None
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish_reason: str = ""


class LLM:
    def __init__(self, model: Decoder, tokenizer=None, max_batch_size: int = 256, max_seq_len: int = 2048,
                 eos_token_ids: Sequence[int] = ()):
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.max_batch_size = max_batch_size
        self.max_seq_len = max_seq_len
        eos = list(eos_token_ids) or ([tokenizer.eos_id] if tokenizer is not None else [])
        self.eos_token_ids = frozenset(eos)
        self.version = 0
        self.stats = {"prompt_tokens": 0, "generated_tokens": 0, "seconds": 0.0}

    @torch.no_grad()
    def load_weights(self, state: Mapping[str, torch.Tensor], version: int) -> None:
        """Copy `state` (names as in the decoder's state_dict) into the engine's model."""
        own = self.model.state_dict()
        unknown = sorted(set(state) - set(own))
        if unknown:
            raise ValueError(f"load_weights: unknown tensors {unknown[:5]}")
        for name, tensor in state.items():
            own[name].copy_(tensor)
        self.version = version

    def generate(self, prompts: Sequence[str] | Sequence[Sequence[int]],
                 params: SamplingParams | Sequence[SamplingParams] = SamplingParams()) -> list[RequestOutput]:
        start = time.perf_counter()
        prompt_ids = [self._encode(p) for p in prompts]
        plist = list(params) if isinstance(params, (list, tuple)) else [params] * len(prompt_ids)
        if len(plist) != len(prompt_ids):
            raise ValueError(f"generate: {len(prompt_ids)} prompts but {len(plist)} SamplingParams")
        seqs = [_Seq(r, i, ids, p, _generator(p, i)) for r, (ids, p) in enumerate(zip(prompt_ids, plist))
                for i in range(p.n)]
        for lo in range(0, len(seqs), self.max_batch_size):
            self._run(seqs[lo: lo + self.max_batch_size])
        self.stats["seconds"] += time.perf_counter() - start
        return self._outputs(prompt_ids, seqs)

    def _encode(self, prompt) -> list[int]:
        ids = self.tokenizer.encode(prompt) if isinstance(prompt, str) else list(prompt)
        if not ids:
            raise ValueError("generate: empty prompt")
        return ids

    @torch.no_grad()
    def _run(self, seqs: list[_Seq]) -> None:
        for s in seqs:
            if len(s.prompt) + s.params.max_tokens > self.max_seq_len:
                raise ValueError(f"generate: prompt of {len(s.prompt)} tokens + max_tokens {s.params.max_tokens} "
                                 f"exceeds engine.max_seq_len {self.max_seq_len}")
        distinct = {tuple(s.prompt): None for s in seqs}
        prompts = list(distinct)
        row_of = {p: i for i, p in enumerate(prompts)}
        max_new = max(s.params.max_tokens for s in seqs)
        arch = self.model.arch
        cache = KVCache(arch.num_hidden_layers, len(prompts), arch.num_key_value_heads,
                        max(map(len, prompts)) + max_new, arch.head_dim)
        last_logits = self._prefill(prompts, cache)
        fan_out = torch.tensor([row_of[tuple(s.prompt)] for s in seqs])
        cache.gather(fan_out)
        self.stats["prompt_tokens"] += sum(map(len, prompts))
        self._decode(seqs, cache, last_logits.index_select(0, fan_out))

    def _prefill(self, prompts: list[tuple[int, ...]], cache: KVCache) -> torch.Tensor:
        width = max(map(len, prompts))
        ids = torch.zeros(len(prompts), width, dtype=torch.long)
        for i, p in enumerate(prompts):
            ids[i, : len(p)] = torch.tensor(p)
        lengths = torch.tensor([len(p) for p in prompts])
        cache.mode = "prefill"
        hidden = self.model.hidden_states(ids, None, cache)
        cache.lengths = lengths
        cache.mode = "decode"
        last = hidden[torch.arange(len(prompts)), lengths - 1]
        return self.model.lm_head(last).float()

    def _decode(self, seqs: list[_Seq], cache: KVCache, logits: torch.Tensor) -> None:
        live = list(seqs)
        temp = torch.tensor([s.params.temperature for s in live])
        top_p = torch.tensor([s.params.top_p for s in live])
        top_k = torch.tensor([s.params.top_k for s in live])
        while True:
            tokens, logprobs = sample(logits, temp, top_p, top_k, [s.generator for s in live])
            keep = [i for i, (s, t, lp) in enumerate(zip(live, tokens.tolist(), logprobs.tolist()))
                    if not self._append(s, t, lp)]
            self.stats["generated_tokens"] += len(live)
            if not keep:
                return
            if len(keep) < len(live):
                idx = torch.tensor(keep)
                live = [live[i] for i in keep]
                cache.gather(idx)
                tokens, temp, top_p, top_k = tokens[idx], temp[idx], top_p[idx], top_k[idx]
            positions = cache.lengths[:, None]
            hidden = self.model.hidden_states(tokens[:, None], positions, cache)
            cache.lengths = cache.lengths + 1
            logits = self.model.lm_head(hidden[:, -1]).float()

    def _append(self, s: _Seq, token: int, logprob: float) -> bool:
        """Record one token; True when the sequence is finished."""
        s.tokens.append(token)
        s.logprobs.append(logprob)
        p = s.params
        if (token in self.eos_token_ids and not p.ignore_eos) or token in p.stop_token_ids:
            s.finish_reason = "stop"
        elif p.stop and self.tokenizer is not None and any(x in self.tokenizer.decode(s.tokens) for x in p.stop):
            s.finish_reason = "stop"
        elif len(s.tokens) >= p.max_tokens:
            s.finish_reason = "length"
        return bool(s.finish_reason)

    def _outputs(self, prompt_ids: list[list[int]], seqs: list[_Seq]) -> list[RequestOutput]:
        outs = [RequestOutput(r, ids) for r, ids in enumerate(prompt_ids)]
        for s in seqs:
            outs[s.request].outputs.append(CompletionOutput(
                s.index, s.tokens, s.logprobs, [self.version] * len(s.tokens), self._text(s), s.finish_reason))
        return outs

    def _text(self, s: _Seq) -> str:
        if self.tokenizer is None:
            return ""
        text = self.tokenizer.decode(s.tokens)
        for stop in s.params.stop:
            if stop in text:
                text = text[: text.index(stop)]
        return text


def _generator(p: SamplingParams, index: int) -> torch.Generator | None:
    return None if p.seed is None else torch.Generator().manual_seed(p.seed + index)
