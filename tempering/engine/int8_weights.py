"""`engine.weights = "int8"`: the engine's linear layers as dynamic int8 (per output channel).

Rollouts of a real model on a CPU are bound by its linear layers: at the small batches of
decoding, by reading their fp32 weights. `Int8Weights` keeps the engine's fp32 model as the one
weights are loaded into (the trainer's copy, unchanged) and runs a second copy whose every
`nn.Linear` is an `Int8Linear`: the weight as int8 with one scale per output row, packed for
fbgemm, and each call's activations quantized to 8 bits over that call's range (7 bits on a CPU
without VNNI, where fbgemm's 16-bit accumulation could overflow). A quarter of the weight bytes
read, int8 matmuls. After each weight load the int8 weights are made again from the fp32 ones
(`refresh`). A row's activations share their scale with the rows of its step, so its logits
move slightly with what it runs beside; the engine records the logprobs it sampled from. The
trainer stays fp32: `algorithm.off_policy = "decoupled"` absorbs the gap. CPU and float32 only.
"""

from __future__ import annotations

import copy
import functools
import warnings

import torch
from torch import nn

from tempering.models import Decoder


@functools.cache
def has_vnni() -> bool:
    """Whether this CPU has 8-bit dot products (AVX512-VNNI or AVX-VNNI)."""
    try:
        flags = open("/proc/cpuinfo").read()
    except OSError:
        return False
    return " avx512_vnni" in flags or " avx_vnni" in flags


class Int8Linear(nn.Module):
    """y = x @ W.T + b, W int8 per output row (fbgemm's packed form), x quantized per call."""

    def __init__(self, linear: nn.Linear, reduce_range: bool):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.reduce_range = reduce_range
        self.set(linear.weight, linear.bias)

    @torch.no_grad()
    def set(self, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
        with warnings.catch_warnings():  # quantized tensors' creation is deprecated; it runs in the torch we pin
            warnings.simplefilter("ignore", UserWarning)
            self.packed = torch.ops.quantized.linear_prepack(per_channel(weight),
                                                             None if bias is None else bias.detach().float())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.ops.quantized.linear_dynamic(x.reshape(-1, self.in_features), self.packed,
                                               reduce_range=self.reduce_range)
        return y.reshape(*x.shape[:-1], self.out_features)


def per_channel(w: torch.Tensor) -> torch.Tensor:
    """w [out, in] as qint8 with one symmetric scale per output row."""
    scale = (w.detach().abs().amax(dim=1) / 127.0).clamp_min(1e-12).double()
    return torch.quantize_per_channel(w.detach().float(), scale, torch.zeros_like(scale, dtype=torch.int64), 0,
                                      torch.qint8)


class Int8Weights:
    def __init__(self, master: Decoder):
        weight = next(master.parameters())
        if weight.device.type != "cpu" or weight.dtype != torch.float32:
            raise ValueError("engine.weights = 'int8' needs a float32 model on the CPU (engine.dtype 'auto' or "
                             "'float32')")
        self.master = master
        self.model: Decoder = copy.deepcopy(master).eval()
        reduce_range = not has_vnni()
        for name, module in list(self.model.named_modules()):
            if isinstance(module, nn.Linear):
                parent, _, leaf = name.rpartition(".")
                setattr(self.model.get_submodule(parent) if parent else self.model, leaf,
                        Int8Linear(module, reduce_range))

    @torch.no_grad()
    def refresh(self) -> None:
        """Make the int8 copy again from the master's weights (after a load)."""
        own = dict(self.model.named_modules())
        for name, module in self.master.named_modules():
            target = own[name]
            if isinstance(target, Int8Linear):
                target.set(module.weight, module.bias)
            elif not isinstance(module, nn.Linear):
                for p_name, p in module.named_parameters(recurse=False):
                    getattr(target, p_name).copy_(p)
