"""The untruncated draw in C (`sampler.c`): one token per row of float32 logits on the CPU, with
its logprob, the softmax's two passes and the draw in one call, no probabilities written.

`draw(logits, temperature, u)` is what `engine.sampler.sample` computes for rows without top-p or
top-k, from the same uniform numbers; with more torch threads the rows are split into runs on
that many threads (`native.split_rows`). It does not truncate, and leaves a row whose largest
logit is not finite to the caller (it only reports one).
"""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path

import torch

from tempering.engine.cpu import native

CHUNK = 128  # tokens per chunk of the two-level draw (CH in sampler.c; the PyTorch path's too)
SPLIT_ELEMENTS = 1 << 18  # logits per run of rows on a thread at least: a hand-off costs ~50 us
SOURCE = Path(__file__).with_suffix(".c")


@functools.lru_cache(maxsize=1)
def _kernel():
    """sampler.c's `draw`, or None (with one warning) where it cannot be built here."""
    lib = native.library(SOURCE, "sampling stays in PyTorch (slower)")
    if lib is None:
        return None
    lib.draw.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p,
                         ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    lib.draw.restype = ctypes.c_int64
    return lib.draw


def built() -> bool:
    """Whether the kernel is built here (built on the first call; one warning where it cannot be)."""
    return _kernel() is not None


def draw(logits: torch.Tensor, temperature: torch.Tensor,
         u: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor, bool]:
    """logits [B, V] float32 on the CPU, temperature [B] (0 = greedy), u [B] float64 uniforms
    (None: every row greedy) -> tokens [B], logprobs [B], and whether every row's largest logit
    was finite (where not, that row's token and logprob are garbage). Only where `built()`."""
    logits = logits.contiguous()
    rows, vocab = logits.shape
    t = temperature.to("cpu", torch.float32)
    inv_t = torch.where(t > 0, 1 / t, torch.zeros_like(t)).contiguous()
    cpu = {"device": "cpu"}  # explicit: the default device may be another (tests set "meta")
    u = torch.zeros(rows, dtype=torch.float64, **cpu) if u is None else u.contiguous()
    tokens, logprobs = torch.empty(rows, dtype=torch.int64, **cpu), torch.empty(rows, **cpu)
    parts = max(1, min(torch.get_num_threads(), rows, rows * vocab // SPLIT_ELEMENTS))
    cdf = torch.empty(parts, -(-vocab // CHUNK), dtype=torch.float64, **cpu)
    kernel, bad = _kernel(), []

    def run(part: int, lo: int, hi: int) -> None:
        found = kernel(logits[lo].data_ptr() if hi > lo else 0, hi - lo, vocab, inv_t[lo:].data_ptr(),
                       u[lo:].data_ptr(), tokens[lo:].data_ptr(), logprobs[lo:].data_ptr(), cdf[part].data_ptr())
        if found >= 0:
            bad.append(found)

    native.split_rows(run, rows, parts, "sampler")
    return tokens, logprobs, not bad
