"""Turning next-token logits into tokens and their logprobs.

The logprob returned is that of the temperature-scaled distribution before top-p/top-k
truncation: the trainer recomputes exactly this quantity (same temperature) for the importance
ratio, so no truncation-dependent term needs to be reproduced there.

Each sampled row draws one uniform number (from its request's generator where it has one) and
takes the token where the cumulative mass passes it (inverse CDF). Float32 CPU rows that are not
truncated (RL sampling) go through a C kernel (`cpu/sampler.py`) that does the softmax's two
passes and the draw in one call, with no probabilities written, split over torch's threads;
everything else takes the PyTorch path, which draws from the same uniform numbers. A row whose
largest logit is NaN or infinite is a ValueError that names the row, on either path."""

from __future__ import annotations

import torch

from tempering.engine.cpu import sampler as cpu_sampler
from tempering.engine.cpu.sampler import CHUNK


def sample(logits: torch.Tensor, temperature: torch.Tensor, top_p: torch.Tensor, top_k: torch.Tensor,
           generators: list[torch.Generator | None], native: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """logits [B, V] fp32; temperature/top_p [B] float; top_k [B] long (0 = off).
    Rows with temperature 0 take the argmax. `native`: untruncated float32 rows on the CPU are
    drawn by the C kernel (`AttentionPlan.native_sampler`: it is built).
    -> tokens [B] long, logprobs [B] float."""
    greedy = temperature == 0
    u = None if bool(greedy.all()) else _uniforms(generators)
    truncated = not (bool((top_p >= 1).all()) and bool((top_k == 0).all()))
    if native and not truncated and logits.device.type == "cpu" and logits.dtype == torch.float32:
        tokens, logprobs, finite = cpu_sampler.draw(logits, temperature, u)
        if finite:
            return tokens, logprobs
    _check_finite(logits.amax(-1))
    if bool((temperature == 1).all()):
        scaled = logits  # RL samples at temperature 1: no scaled copy of the logits
    else:
        scaled = logits / torch.where(greedy, torch.ones_like(temperature), temperature)[:, None]
    # One softmax serves the draw and the logprob: the log of a sampled token's fp32 probability
    # is as exact as log_softmax's (which loses ~1e-6 subtracting large logits), and a token a
    # draw can pick is never one whose probability underflows to zero.
    probs = torch.softmax(scaled, dim=-1)
    any_greedy = bool(greedy.any())
    if any_greedy:
        tokens = logits.argmax(dim=-1)
    if u is not None:
        sampled = _draw(_truncate(probs, top_p, top_k) if truncated else probs, u.to(probs.device))
        tokens = torch.where(greedy, tokens, sampled) if any_greedy else sampled
    return tokens, probs.gather(1, tokens[:, None]).squeeze(1).log()


def _check_finite(largest: torch.Tensor) -> None:
    """A row whose largest logit is NaN or infinite has no distribution to draw from."""
    bad = (~torch.isfinite(largest)).nonzero()
    if len(bad):
        raise ValueError(f"sampler: the logits of row {int(bad[0, 0])} (of {len(largest)}) have no finite largest "
                         f"value (a NaN or +inf logit, or every logit -inf): the model's output is not finite")


def _uniforms(generators: list[torch.Generator | None]) -> torch.Tensor:
    """One uniform number in [0, 1) per row, float64, on the host, where the requests'
    generators are: seeded rows draw theirs from their own generator, so their samples do not
    depend on what else is in the batch."""
    if all(g is None for g in generators):
        return torch.empty(len(generators), dtype=torch.float64, device="cpu").uniform_()
    # one cat of one-element draws: assigning each into a tensor cost 12 us a row (0.8 ms a step at 64 rows)
    return torch.cat([torch.rand(1, dtype=torch.float64, generator=g, device="cpu") for g in generators])


def _truncate(probs: torch.Tensor, top_p: torch.Tensor, top_k: torch.Tensor) -> torch.Tensor:
    sorted_p, order = probs.sort(dim=-1, descending=True)
    rank = torch.arange(probs.shape[-1], device=probs.device)[None, :]
    before = sorted_p.cumsum(-1) - sorted_p  # mass strictly before each token
    keep = before < top_p[:, None]
    keep &= (top_k[:, None] == 0) | (rank < top_k[:, None])
    keep[:, 0] = True
    sorted_p = sorted_p * keep
    return torch.zeros_like(probs).scatter_(1, order, sorted_p)


def _draw(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """One token per row by inverse CDF: the row's uniform number `u` against the row's
    cumulative mass, found in two levels: the chunk of CHUNK tokens the number falls in, by the
    cumulative sums of the chunks' masses, then the token, by the cumulative sum of that chunk
    alone. That reads the probabilities once (a cumulative sum over the whole vocabulary is a
    serial scan, measured 2-3x slower) and sums in float64 where it accumulates. Far cheaper than
    torch.multinomial per row (measured: 0.45 ms a row at a 16k vocabulary)."""
    vocab = probs.shape[1]
    full = vocab - vocab % CHUNK
    sums = [probs[:, :full].unflatten(1, (full // CHUNK, CHUNK)).sum(-1)] if full else []
    if full < vocab:
        sums.append(probs[:, full:].sum(-1, keepdim=True))
    chunk_cdf = torch.cat(sums, 1).double().cumsum(-1)
    target = (u * chunk_cdf[:, -1])[:, None]
    chunk = torch.searchsorted(chunk_cdf, target, right=True).clamp_(max=chunk_cdf.shape[1] - 1)
    before = torch.nn.functional.pad(chunk_cdf, (1, 0)).gather(1, chunk)  # the mass of the chunks before
    cols = chunk * CHUNK + torch.arange(CHUNK, device=probs.device)
    inner = probs.gather(1, cols.clamp(max=vocab - 1)).masked_fill_(cols >= vocab, 0.0)
    # rounding can put the number past the chunk's last live token: that token, then
    live = inner > 0
    last_live = CHUNK - 1 - live.flip(-1).int().argmax(-1, keepdim=True)
    offset = torch.searchsorted(before + inner.double().cumsum(-1), target, right=True).clamp_(max=CHUNK - 1)
    offset = torch.where(live.gather(1, offset), offset, last_live)
    return (chunk * CHUNK + offset).squeeze(1)
