"""Attention that reads the int8 KV pool directly: no dequantized copy of the context's keys and values.

`attend(pool, layer, q, index, mask)` equals SDPA over `KVPool.gather`'s dequantized keys and
values, in two passes over chunks of keys: the scores (each chunk's int8 keys cast to fp32 in a
small reused buffer, the keys' scales folded into the scores, one exact softmax per row), then the
values (their scales folded into the probabilities). Nothing context-sized is written in float,
and the arithmetic is fp32 throughout, so the result equals dequantize-then-SDPA to fp32 rounding
(tested). The engine routes long decode-shaped reads (at least `MIN_KEYS` keys) here where the C
decode kernel is not built; short reads and prefill chunks, where SDPA over a small dequantized
copy wins, stay on `gather`. It does not compute q . k or p @ v in int8 (too lossy), nor compile a
kernel. Its measured speed against dequantize-then-SDPA: docs/benchmarks.md."""

from __future__ import annotations

from typing import Literal

import torch

from tempering.engine.kv_cache import KVPool

Mode = Literal["auto", "always", "never"]  # AttentionPlan.int8_attention

MIN_KEYS = 8192  # below, the dequantized copy (4 MiB at 8192 keys) stays in cache and SDPA wins
CHUNK = 1 << 20  # fp32 elements of one chunk of cast keys or values (4 MiB)
SCORES = 1 << 22  # fp32 elements of scores per pass (16 MiB); a prefill chunk's queries split to fit

_buffers: dict[tuple[str, torch.device], torch.Tensor] = {}


def _buffer(name: str, numel: int, device: torch.device) -> torch.Tensor:
    """A reused flat fp32 buffer (on CPU a fresh large allocation page-faults on every call)."""
    key = (name, device)
    buf = _buffers.get(key)
    if buf is None or buf.numel() < numel:
        buf = _buffers[key] = torch.empty(numel, dtype=torch.float32, device=device)
    return buf[:numel]


def use(mode: Mode, keys: int, prefill: bool) -> bool:
    """Whether a read of `keys` pool slots in all (rows x keys) of an int8 pool goes through
    `attend`, under the plan's `mode` (`AttentionPlan.int8_attention`, "never" for other pools):
    "auto" = decode-shaped reads (one query per row: decode buckets, shared prefixes, sparse
    decode rows) of at least MIN_KEYS keys, where it measured faster."""
    return mode == "always" or (mode == "auto" and not prefill and keys >= MIN_KEYS)


def attend(pool: KVPool, layer: int, q: torch.Tensor, index: torch.Tensor, mask: torch.Tensor | None = None,
           lse: bool = False):
    """q [B, H, Q, D] over the int8 pool's slots `index` [B, K] (per batch row), with `mask`
    broadcastable to [B, Q, K] (bool, True = may attend; every query needs one key) ->
    [B, H, Q, D] in q's dtype, and with `lse` also the log-sum-exp of the scaled scores
    [B, H, Q] (fp32), as SDPA's flash kernel returns it. Query head h reads kv head h // (H / KVH)."""
    b, h, nq, d = q.shape
    k = index.shape[1]
    kvh = pool.kv_heads
    rep = h // kvh
    kq, vq, ks, vs = pool.quantized_layer(layer, index.reshape(-1))
    flat = index.reshape(-1)
    # the keys' and values' scales per (row, kv head, key): [B, KVH, 1, K], fp32
    k_scale = ks.index_select(0, flat).view(b, k, kvh).permute(0, 2, 1).float().unsqueeze(2)
    v_scale = vs.index_select(0, flat).view(b, k, kvh).permute(0, 2, 1).float().unsqueeze(2)
    qs = (q.float() * d ** -0.5).view(b, kvh, rep, nq, d)
    if mask is not None:
        mask = mask.expand(b, nq, k)
    step = max(1, min(nq, SCORES // max(1, b * h * k)))
    out = torch.empty(b, kvh, rep, nq, d, dtype=torch.float32, device=q.device)
    lses = torch.empty(b, kvh, rep, nq, dtype=torch.float32, device=q.device) if lse else None
    for s in range(0, nq, step):
        e = min(nq, s + step)
        o, l = _two_pass(kq, vq, k_scale, v_scale, qs[:, :, :, s:e], index, None if mask is None else mask[:, s:e])
        out[:, :, :, s:e] = o
        if lses is not None:
            lses[:, :, :, s:e] = l
    out = out.view(b, h, nq, d).to(q.dtype)
    return (out, lses.view(b, h, nq)) if lse else out


def _two_pass(kq, vq, k_scale, v_scale, qs, index, mask):
    """qs [B, KVH, rep, Q, D] (scaled) -> out [B, KVH, rep, Q, D], lse [B, KVH, rep, Q]."""
    b, kvh, rep, nq, d = qs.shape
    k = index.shape[1]
    rows = rep * nq
    q3 = qs.reshape(b * kvh, rows, d)
    scores = _buffer("scores", b * kvh * rows * k, qs.device).view(b, kvh, rows, k)
    c = max(16, CHUNK // (b * kvh * d))
    cast = _buffer("chunk", b * kvh * min(c, k) * d, qs.device)
    for s in range(0, k, c):  # pass 1: q . k8 per chunk
        e = min(k, s + c)
        kf = cast[: b * kvh * (e - s) * d].view(b, kvh, e - s, d)
        kf.copy_(kq.index_select(0, index[:, s:e].reshape(-1)).view(b, e - s, kvh, d).transpose(1, 2))
        scores.view(b * kvh, rows, k)[:, :, s:e] = torch.bmm(q3, kf.view(b * kvh, e - s, d).transpose(1, 2))
    scores.mul_(k_scale)
    s5 = scores.view(b, kvh, rep, nq, k)
    if mask is not None:
        s5.masked_fill_(~mask[:, None, None], float("-inf"))
    top = scores.amax(-1, keepdim=True)
    scores.sub_(top).exp_()
    total = scores.sum(-1, keepdim=True)
    scores.mul_(v_scale)  # p * s_v: the values' scales, folded into the (unnormalised) probabilities
    out = torch.zeros(b * kvh, rows, d, dtype=torch.float32, device=qs.device)
    p3 = scores.view(b * kvh, rows, k)
    for s in range(0, k, c):  # pass 2: p . v8 per chunk
        e = min(k, s + c)
        vf = cast[: b * kvh * (e - s) * d].view(b, kvh, e - s, d)
        vf.copy_(vq.index_select(0, index[:, s:e].reshape(-1)).view(b, e - s, kvh, d).transpose(1, 2))
        out.baddbmm_(p3[:, :, s:e], vf.view(b * kvh, e - s, d))
    out = out.view(b, kvh, rows, d).div_(total)
    lse = (top + total.log()).view(b, kvh, rep, nq)
    return out.view(b, kvh, rep, nq, d), lse
