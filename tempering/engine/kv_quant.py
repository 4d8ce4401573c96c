"""int8 KV storage: symmetric quantization with one fp16 scale per token and KV head.

A scale per (token, head) over head_dim values keeps the error of each stored vector to half a
step of its own largest entry, and stores 1 + 2/head_dim bytes per value (0.26x fp32 at
head_dim 64, 0.28x at 16). The scale is rounded to fp16 before quantizing, so storing it in fp16
adds no error. Decode reads attend over int8 as stored (on CPU `paged_decode`, elsewhere the
long ones `int8_attention`: the scales fold into the scores and the weights), so int8 saves
memory and, there, time; prefill chunks (and short decode reads without the kernel) still go
through `KVPool.gather`, which dequantizes what a step gathers.
"""

from __future__ import annotations

import torch


def quantize(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x [..., D] float -> (int8 [..., D], scale [..., 1] fp16) with x ~= q * scale."""
    scale = (x.abs().amax(dim=-1, keepdim=True).float() / 127.0).clamp_min(1e-6).half()
    q = torch.round(x / scale.float()).clamp_(-127, 127).to(torch.int8)
    return q, scale


def dequantize(q: torch.Tensor, scale: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """int8 [..., D] and fp16 scale [..., 1] -> fp32 [..., D] (into `out` when given)."""
    scale = scale.float()
    return torch.mul(q, scale, out=out) if out is not None else q * scale
