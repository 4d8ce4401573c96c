"""Turning next-token logits into tokens and their logprobs.

The logprob returned is that of the temperature-scaled distribution before top-p/top-k
truncation: the trainer recomputes exactly this quantity (same temperature) for the importance
ratio, so no truncation-dependent term needs to be reproduced there.
"""

from __future__ import annotations

import torch


def sample(logits: torch.Tensor, temperature: torch.Tensor, top_p: torch.Tensor, top_k: torch.Tensor,
           generators: list[torch.Generator | None]) -> tuple[torch.Tensor, torch.Tensor]:
    """logits [B, V] fp32; temperature/top_p [B] float; top_k [B] long (0 = off).
    Rows with temperature 0 take the argmax. -> tokens [B] long, logprobs [B] float."""
    greedy = temperature == 0
    scaled = logits / torch.where(greedy, torch.ones_like(temperature), temperature)[:, None]
    logprobs_all = torch.log_softmax(scaled, dim=-1)
    tokens = logits.argmax(dim=-1)
    if not bool(greedy.all()):
        probs = _truncate(logprobs_all.exp(), top_p, top_k)
        sampled = _draw(probs, generators)
        tokens = torch.where(greedy, tokens, sampled)
    return tokens, logprobs_all.gather(1, tokens[:, None]).squeeze(1)


def _truncate(probs: torch.Tensor, top_p: torch.Tensor, top_k: torch.Tensor) -> torch.Tensor:
    if bool((top_p >= 1).all()) and bool((top_k == 0).all()):
        return probs
    sorted_p, order = probs.sort(dim=-1, descending=True)
    rank = torch.arange(probs.shape[-1], device=probs.device)[None, :]
    before = sorted_p.cumsum(-1) - sorted_p  # mass strictly before each token
    keep = before < top_p[:, None]
    keep &= (top_k[:, None] == 0) | (rank < top_k[:, None])
    keep[:, 0] = True
    sorted_p = sorted_p * keep
    return torch.zeros_like(probs).scatter_(1, order, sorted_p)


def _draw(probs: torch.Tensor, generators: list[torch.Generator | None]) -> torch.Tensor:
    if all(g is None for g in generators):
        return torch.multinomial(probs, 1).squeeze(1)
    # Seeded requests draw from their own generator so their samples do not depend on batching.
    return torch.cat([torch.multinomial(p[None], 1, generator=g).squeeze(1) for p, g in zip(probs, generators)])
