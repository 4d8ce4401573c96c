"""Attention over keys split into parts: each part's softmax attention with its log-sum-exp,
merged into the attention over all of them (cascade attention's shared prefix and own keys;
block-sparse attention's read blocks and the unread blocks' group means).

`FLASH_WITH_LSE` is SDPA's CPU kernel that also returns the log-sum-exp (None where torch has
none); `merge` combines two parts. It computes no attention itself.
"""

from __future__ import annotations

import torch

FLASH_WITH_LSE = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)


def merge(o1: torch.Tensor, l1: torch.Tensor, o2: torch.Tensor, l2: torch.Tensor) -> torch.Tensor:
    """Outputs [..., D] and log-sum-exps [...] of two parts -> the output over both, in o1's
    dtype. l1 must be finite (its part has a key); l2 may be -inf (a part with none)."""
    top = torch.maximum(l1, l2)
    w1, w2 = (l1 - top).exp_()[..., None], (l2 - top).exp_()[..., None]
    return ((o1.float() * w1 + o2.float() * w2) / (w1 + w2)).to(o1.dtype)
