"""Engine test helpers: a tiny architecture, prompts, and the trainer-side reference the engine must match."""

from __future__ import annotations

import contextlib
import dataclasses
import shutil

import torch
import torch.nn.functional as F

from tempering.engine import LLM
from tempering.models import Arch
from tempering.trainer import token_logprobs

ARCH = Arch(vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, head_dim=16, max_position_embeddings=4096)


def random_prompts(n: int, lo: int = 3, hi: int = 40, seed: int = 0) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, ARCH.vocab_size, (int(torch.randint(lo, hi, (1,), generator=g)),), generator=g).tolist()
            for _ in range(n)]


def reference_logprobs(model, prompt: list[int], completion: list[int], temperature: float = 1.0,
                       window: int = 0, sinks: int = 0) -> torch.Tensor:
    """What the trainer computes for the completion tokens (optionally with the engine's
    sliding-window + sink mask applied to full-sequence attention)."""
    ids = torch.tensor([prompt + completion])
    with torch.no_grad():
        if not window:
            logp, _ = token_logprobs(model, ids, temperature)
        else:
            logits = model(ids[:, :-1], None, _windowed(window, sinks)) / temperature
            logp = torch.log_softmax(logits, -1).gather(-1, ids[:, 1:, None]).squeeze(-1)
    return logp[0, len(prompt) - 1:]


def _windowed(window: int, sinks: int):
    def attention(layer, q, k, v):
        t = q.shape[2]
        qp, kp = torch.arange(t)[:, None], torch.arange(t)[None, :]
        mask = (kp <= qp) & ((kp < sinks) | (kp > qp - window))
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
    return attention


def assert_matches_trainer(model, prompt, completion_output, temperature=1.0, **window):
    ref = reference_logprobs(model, prompt, completion_output.token_ids, temperature, **window)
    torch.testing.assert_close(torch.tensor(completion_output.logprobs), ref, atol=1e-4, rtol=0)


def engine_with(model, paths: dict, **options) -> LLM:
    """An `LLM` with `options` whose chosen `AttentionPlan` has `paths` changed (a path forced on
    or off, everything else as the engine would choose)."""
    plan = dataclasses.replace(LLM(model, **options).plan, **paths)
    return LLM(model, plan=plan, **options)


def finish(engine) -> list:
    """Step until nothing is unfinished. -> the finished outputs, in the order they finished."""
    done = []
    while engine.has_unfinished():
        done += [out for out in engine.step() if out.finished]
    return done


@contextlib.contextmanager
def built_with(kernels, flags: str, cache, monkeypatch, compiler: str | None = None):
    """Within: `kernels` (modules' cached loaders of their C kernels, such as
    `paged_decode._kernel`) are built afresh into `cache`, on first call, by `compiler` (else
    the machine's) with `flags` added ($CC may carry flags); after, they are forgotten."""
    compiler = compiler or shutil.which("cc") or shutil.which("gcc") or "clang"
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    monkeypatch.setenv("CC", f"{compiler} {flags}".strip())
    for kernel in kernels:
        kernel.cache_clear()
    try:
        yield
    finally:
        for kernel in kernels:
            kernel.cache_clear()


@contextlib.contextmanager
def torch_threads(count: int):
    """Within: torch (and the C kernels' row splits, which follow it) use `count` threads."""
    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)
