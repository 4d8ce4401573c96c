"""Attention that reads the int8 KV pool directly: no dequantized copy of the context's keys and values.

`attend(pool, layer, q, index, mask)` is the attention of queries `q` over the pool slots `index`
(per row of a batch: a decode bucket's rows, a prefill chunk, block-sparse rows), the same as
SDPA over `KVPool.gather`'s dequantized keys and values, in two passes over the keys, a chunk of
keys at a time:

1. scores: each chunk's int8 keys are read from the pool (`index_select` of that chunk's slots),
   cast to fp32 head-major into a small reused buffer, and multiplied with the queries into a
   scores buffer; then the keys' fp16 scales multiply the scores (q . (k8 * s) = (q . k8) * s),
   the mask fills -inf, and the softmax is taken over the whole row in fp32, exactly.
2. values: the values' scales are folded into the probabilities (p * s, per key and kv head),
   and each chunk's int8 values, cast the same way, are multiplied in and accumulated.

So nothing context-sized is ever float K/V: the largest buffers are one chunk of keys or values
(`CHUNK` elements, 4 MiB in fp32) and the scores (H floats per key and query; a prefill chunk's
queries are split into blocks so that the scores stay under `SCORES` elements). With head_dim 64
and 2 kv heads that is 24 bytes per key for 6 query heads, against the 512 bytes per key of the
dequantized fp32 keys and values that `gather` writes and SDPA reads back. The arithmetic is
fp32 throughout (the int8 -> fp32 cast is exact), so the result equals dequantize-then-SDPA up to
fp32 rounding (about 1e-6, tested); the pool's own quantization error is unchanged.

Measured (bench/int8_attention.py, 2-core shared CPU, 1 thread, 6 query heads, 2 kv heads,
head_dim 64, ms per call, best of 3; ratio = dequantize ms / fused ms = fused keys per second
over dequantize's; max |difference| 3e-7 to 3e-6):

    kind      batch  context   dequantize+SDPA   fused   ratio
    decode      1      1k            0.22         0.31   0.72x
    decode      1      8k            2.0          1.2    1.6x
    decode      1     32k           25            6.5    3.9x
    decode     16      1k            6.6          2.7    2.4x
    decode     16      8k          129           23      5.6x
    decode     16     32k          960          161      6.0x
    prefill     1      1k (256 q)    5.9         11.6    0.50x
    prefill     1      8k (256 q)   55          101      0.54x
    prefill     1     32k (256 q)  250          399      0.63x

(A 2-thread run on the shared machine was too noisy to report.) On the CPU, decode buckets and
block-sparse decode rows go to `paged_decode`'s C kernel first where it is built (its numba
predecessor was 1.3-1.9x this path). Otherwise the engine (`use`, `MODE` "auto") routes decode-shaped reads (one query per
row) of at least `MIN_KEYS` keys here and leaves short reads and prefill chunks, where SDPA's
kernel over a cache-sized dequantized copy wins, on `KVPool.gather`. Much of dequantize+SDPA's
cost at long contexts is SDPA's masked one-query path over the float copy, not only the
dequantizing.

The saving is mostly memory traffic: dequantizing writes 4 bytes per stored byte and SDPA reads
them back, where the fused path reads each int8 byte once and casts it in cache. What it does
not do:

- q . k in int8 (`torch._int_mm`, which runs on CPU): measured, it saves about 15% more at 8k-32k
  but quantizing q to int8 per row adds its own error (about 1e-3 on the outputs, against 1e-6
  here); and p @ v in int8 loses the small probabilities of a row with one dominant key (p
  quantized per row to 127 steps rounds them all to 0). Not used.
- a compiled kernel (no C++ extension: a CI machine may lack a compiler), nor flex_attention over
  int8 (the int8 pool with `attention="flex"` still dequantizes for its masked prefill chunks).
- it does not speed up the gather itself: one `index_select` of 128-byte rows per slot, the same
  as before, is now about a third of the time.
"""

from __future__ import annotations

import torch

from tempering.engine.kv_cache import KVPool

# Which reads of an int8 pool the engine's attention routes here: "auto" = decode-shaped reads
# (one query per row: decode buckets, shared prefixes, sparse decode rows) of at least MIN_KEYS
# keys in all, where it measured faster; "always" (tests); "never" = dequantize-then-SDPA.
MODE = "auto"
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


def use(pool: KVPool, keys: int, prefill: bool) -> bool:
    """Whether a read of `keys` pool slots in all (rows x keys) goes through `attend` (`MODE`)."""
    if not pool.quantized or MODE == "never":
        return False
    return MODE == "always" or (not prefill and keys >= MIN_KEYS)


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
