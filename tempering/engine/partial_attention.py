"""Attention over keys split into parts: each part's softmax attention with its log-sum-exp,
merged into the attention over all of them (cascade attention's shared prefix and own keys;
block-sparse attention's read blocks and the unread blocks' group means).

`flash_with_lse` is SDPA's CPU kernel that also returns the log-sum-exp (`has_flash_with_lse`:
whether this torch has it; the engine's plan says whether it is used); `merge` combines two
parts. It computes no attention itself.
"""

from __future__ import annotations

import torch

_FLASH = "_scaled_dot_product_flash_attention_for_cpu"  # CPU tensors only: the op has no other kernel


def has_flash_with_lse() -> bool:
    return hasattr(torch.ops.aten, _FLASH)


def flash_with_lse(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                   attn_mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """SDPA over CPU tensors q [B, H, Q, D], k/v [B, H, K, D] -> the output and the log-sum-exp
    of the scaled scores [B, H, Q] (float32)."""
    out, lse = getattr(torch.ops.aten, _FLASH)(q, k, v, attn_mask=attn_mask)[:2]
    return out, lse


def merge(o1: torch.Tensor, l1: torch.Tensor, o2: torch.Tensor, l2: torch.Tensor) -> torch.Tensor:
    """Outputs [..., D] and log-sum-exps [...] of two parts -> the output over both, in o1's
    dtype. l1 must be finite (its part has a key); l2 may be -inf (a part with none)."""
    top = torch.maximum(l1, l2)
    w1, w2 = (l1 - top).exp_()[..., None], (l2 - top).exp_()[..., None]
    return ((o1.float() * w1 + o2.float() * w2) / (w1 + w2)).to(o1.dtype)
