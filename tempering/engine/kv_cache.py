"""`KVPool`: the paged KV storage, one tensor per layer for keys and one for values.

Layout is slot-major, `[num_blocks * block_size, kv_heads, head_dim]`, where slot =
block * block_size + offset: writing a step's tokens is one `index_copy_` and reading a batch's
context is one `index_select` per layer into a buffer reused by every layer (measured here:
gathering slot-major rows is about 3x cheaper than head-major ones, and attention over the
gathered view is cheaper too). With `dtype="int8"` values are stored quantized with per-token
scales (see kv_quant) and dequantized on gather. This module knows nothing of sequences.
"""

from __future__ import annotations

import torch

from tempering.engine.kv_quant import dequantize, quantize


class KVPool:
    def __init__(self, layers: int, num_blocks: int, block_size: int, kv_heads: int, head_dim: int,
                 dtype: str = "fp32"):
        if dtype not in ("fp32", "int8"):
            raise ValueError(f"KVPool: kv dtype must be 'fp32' or 'int8', got {dtype!r}")
        self.block_size, self.kv_heads, self.head_dim = block_size, kv_heads, head_dim
        self.quantized = dtype == "int8"
        slots = num_blocks * block_size
        store = torch.int8 if self.quantized else torch.float32
        # torch.empty: pages are only touched (and counted by the OS) once written.
        self.k = [torch.empty(slots, kv_heads, head_dim, dtype=store) for _ in range(layers)]
        self.v = [torch.empty(slots, kv_heads, head_dim, dtype=store) for _ in range(layers)]
        if self.quantized:
            self.k_scale = [torch.ones(slots, kv_heads, 1, dtype=torch.float16) for _ in range(layers)]
            self.v_scale = [torch.ones(slots, kv_heads, 1, dtype=torch.float16) for _ in range(layers)]
        self._bufs = [(torch.empty(0), torch.empty(0)), (torch.empty(0), torch.empty(0))]

    @property
    def bytes_per_token(self) -> int:
        """Stored bytes per token position over all layers, keys and values, scales included."""
        per = self.kv_heads * self.head_dim * (1 if self.quantized else 4)
        if self.quantized:
            per += self.kv_heads * 2  # the fp16 scale
        return 2 * len(self.k) * per

    def write(self, layer: int, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """slots [N]; k, v [N, kv_heads, head_dim]."""
        if self.quantized:
            qk, sk = quantize(k)
            qv, sv = quantize(v)
            self.k[layer].index_copy_(0, slots, qk)
            self.v[layer].index_copy_(0, slots, qv)
            self.k_scale[layer].index_copy_(0, slots, sk)
            self.v_scale[layer].index_copy_(0, slots, sv)
        else:
            self.k[layer].index_copy_(0, slots, k)
            self.v[layer].index_copy_(0, slots, v)

    def gather(self, layer: int, index: torch.Tensor, buffer: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        """index [M] slots -> k, v [M, kv_heads, head_dim] fp32, valid until the next gather
        into the same `buffer` (0 or 1: two gathers can be alive at once)."""
        m = index.numel()
        bk, bv = self._bufs[buffer]
        if bk.shape[0] < m:
            shape = (max(m, 2 * bk.shape[0]), self.kv_heads, self.head_dim)
            bk, bv = torch.empty(shape), torch.empty(shape)
            self._bufs[buffer] = (bk, bv)
        bk, bv = bk[:m], bv[:m]
        if not self.quantized:
            torch.index_select(self.k[layer], 0, index, out=bk)
            torch.index_select(self.v[layer], 0, index, out=bv)
            return bk, bv
        dequantize(self.k[layer].index_select(0, index), self.k_scale[layer].index_select(0, index), out=bk)
        dequantize(self.v[layer].index_select(0, index), self.v_scale[layer].index_select(0, index), out=bv)
        return bk, bv

    def copy_block(self, src: int, dst: int, count: int) -> None:
        """Copy the first `count` slots of block `src` into block `dst` in every layer (fork)."""
        bs = self.block_size
        a, b = slice(src * bs, src * bs + count), slice(dst * bs, dst * bs + count)
        tensors = [self.k, self.v] + ([self.k_scale, self.v_scale] if self.quantized else [])
        for per_layer in tensors:
            for t in per_layer:
                t[b] = t[a]
