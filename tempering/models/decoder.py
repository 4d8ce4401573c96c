"""`Decoder`: a plain Llama/Qwen2-style causal LM (RMSNorm, RoPE, GQA, SwiGLU).

Parameter names are HF's (`model.layers.0.self_attn.q_proj.weight`, ...) so checkpoints load by
name. The module knows nothing about KV caches: attention over past tokens is delegated to an
`attention` callable passed to `forward`, which the engine implements with its cache; without
one, each row is attended causally on its own (the trainer's path). Likewise the trainer may pass
a `head` callable that takes the final hidden states and the LM head's weight in place of the
logits (chunked logprobs never build `[tokens, vocab]`); it goes through `forward` so that hooks
applied from outside (FSDP2 gathering the weight) still run. Parallelism and compilation are
applied from outside.
"""

from __future__ import annotations

from typing import Callable, TypeVar

import torch
import torch.nn.functional as F
from torch import nn

from tempering.models.arch import Arch
from tempering.models.rope import apply_rotary, cos_sin, inverse_frequencies

# attention(layer_index, q [B,H,T,D], k [B,KVH,T,D], v [B,KVH,T,D]) -> [B,H,T,D]
Attention = Callable[[int, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
# head(hidden [B,T,hidden] after the final norm, lm_head weight [vocab, hidden]) -> what forward returns
R = TypeVar("R")
Head = Callable[[torch.Tensor, torch.Tensor], R]


def causal_attention(layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=q.shape[1] != k.shape[1])


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


class SelfAttention(nn.Module):
    def __init__(self, arch: Arch, index: int):
        super().__init__()
        self.index = index
        self.heads, self.kv_heads, self.head_dim = arch.num_attention_heads, arch.num_key_value_heads, arch.head_dim
        h, d = arch.hidden_size, arch.head_dim
        self.q_proj = nn.Linear(h, self.heads * d, bias=arch.qkv_bias)
        self.k_proj = nn.Linear(h, self.kv_heads * d, bias=arch.qkv_bias)
        self.v_proj = nn.Linear(h, self.kv_heads * d, bias=arch.qkv_bias)
        self.o_proj = nn.Linear(self.heads * d, h, bias=arch.o_bias)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, attention: Attention) -> torch.Tensor:
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        out = attention(self.index, q, k, v)
        return self.o_proj(out.transpose(1, 2).reshape(b, t, self.heads * self.head_dim))


class MLP(nn.Module):
    def __init__(self, arch: Arch):
        super().__init__()
        self.gate_proj = nn.Linear(arch.hidden_size, arch.intermediate_size, bias=False)
        self.up_proj = nn.Linear(arch.hidden_size, arch.intermediate_size, bias=False)
        self.down_proj = nn.Linear(arch.intermediate_size, arch.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Block(nn.Module):
    def __init__(self, arch: Arch, index: int):
        super().__init__()
        self.self_attn = SelfAttention(arch, index)
        self.mlp = MLP(arch)
        self.input_layernorm = RMSNorm(arch.hidden_size, arch.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(arch.hidden_size, arch.rms_norm_eps)

    def forward(self, x, cos, sin, attention: Attention):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, attention)
        return x + self.mlp(self.post_attention_layernorm(x))


class Body(nn.Module):
    """HF's `model.` prefix: embeddings, blocks and the final norm."""

    def __init__(self, arch: Arch):
        super().__init__()
        self.embed_tokens = nn.Embedding(arch.vocab_size, arch.hidden_size)
        self.layers = nn.ModuleList(Block(arch, i) for i in range(arch.num_hidden_layers))
        self.norm = RMSNorm(arch.hidden_size, arch.rms_norm_eps)

    def forward(self, input_ids: torch.Tensor, inv_freq: torch.Tensor, positions: torch.Tensor | None = None,
                attention: Attention = causal_attention) -> torch.Tensor:
        """input_ids, positions [B, T] -> final normed hidden states [B, T, hidden]. The rotary
        frequencies belong to the model that owns the body (a derived buffer, never stored)."""
        if positions is None:
            positions = torch.arange(input_ids.shape[1], device=input_ids.device).expand_as(input_ids)
        x = self.embed_tokens(input_ids)
        cos, sin = cos_sin(inv_freq, positions, x.dtype)
        for block in self.layers:
            x = block(x, cos, sin, attention)
        return self.norm(x)


class Decoder(nn.Module):
    def __init__(self, arch: Arch):
        super().__init__()
        self.arch = arch
        self.model = Body(arch)
        self.lm_head = nn.Linear(arch.hidden_size, arch.vocab_size, bias=False)
        if arch.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight
        self.register_buffer("inv_freq", inverse_frequencies(arch), persistent=False)

    def hidden_states(self, input_ids: torch.Tensor, positions: torch.Tensor | None = None,
                      attention: Attention = causal_attention) -> torch.Tensor:
        """input_ids, positions [B, T] -> final normed hidden states [B, T, hidden]."""
        return self.model(input_ids, self.inv_freq, positions, attention)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor | None = None,
                attention: Attention = causal_attention, head: Head[R] | None = None) -> torch.Tensor | R:
        """-> logits [B, T, vocab] in fp32; with `head`, what head(hidden, lm_head.weight) returns."""
        hidden = self.hidden_states(input_ids, positions, attention)
        if head is not None:
            return head(hidden, self.lm_head.weight)
        return self.lm_head(hidden).float()

    def init_weights(self, generator: torch.Generator | None = None, std: float = 0.02) -> None:
        init_parameters(self, generator, std)


def init_parameters(module: nn.Module, generator: torch.Generator | None = None, std: float = 0.02) -> None:
    """Random init as HF's: norms 1, biases 0, every other weight normal(0, std)."""
    for name, p in module.named_parameters():
        if name.endswith("norm.weight"):
            nn.init.ones_(p)
        elif name.endswith("bias"):
            nn.init.zeros_(p)
        else:
            nn.init.normal_(p, 0.0, std, generator=generator)
