"""A contiguous per-sequence KV cache and the attention that reads it.

Rows are sequences; row i holds `lengths[i]` valid positions. Prefill runs right-padded, so a
row's real tokens never attend to padding and the padding slots are simply overwritten later.
Decode writes each row's new key/value at its own length and masks keys beyond it. Rows of
finished sequences are dropped by `keep`. This is the first engine's cache: memory is
`rows x max_len`, with no paging and no sharing between rows.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


class KVCache:
    def __init__(self, layers: int, rows: int, kv_heads: int, max_len: int, head_dim: int,
                 dtype: torch.dtype = torch.float32):
        shape = (rows, kv_heads, max_len, head_dim)
        self.k = [torch.zeros(shape, dtype=dtype) for _ in range(layers)]
        self.v = [torch.zeros(shape, dtype=dtype) for _ in range(layers)]
        self.lengths = torch.zeros(rows, dtype=torch.long)
        self.mode = "prefill"

    @property
    def bytes_per_token(self) -> int:
        k = self.k[0]
        return 2 * len(self.k) * k.shape[1] * k.shape[3] * k.element_size()

    def __call__(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """The `Attention` callable the decoder runs with; updates the cache as a side effect."""
        gqa = q.shape[1] != k.shape[1]
        if self.mode == "prefill":
            t = k.shape[2]
            self.k[layer][:, :, :t] = k
            self.v[layer][:, :, :t] = v
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
        rows = torch.arange(q.shape[0])
        self.k[layer][rows, :, self.lengths] = k[:, :, 0]
        self.v[layer][rows, :, self.lengths] = v[:, :, 0]
        span = int(self.lengths.max()) + 1
        mask = torch.arange(span)[None, :] <= self.lengths[:, None]
        return F.scaled_dot_product_attention(
            q, self.k[layer][:, :, :span], self.v[layer][:, :, :span],
            attn_mask=mask[:, None, None, :], enable_gqa=gqa)

    def gather(self, index: torch.Tensor) -> None:
        """Keep rows `index` (in that order): drop finished sequences or fan a prompt out to n."""
        self.k = [t.index_select(0, index) for t in self.k]
        self.v = [t.index_select(0, index) for t in self.v]
        self.lengths = self.lengths.index_select(0, index)
