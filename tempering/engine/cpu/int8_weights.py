"""`engine.weights = "int8"`: the engine's linear layers as int8 products (weights and activations).

Rollouts of a real model on a CPU are bound by its linear layers. `Int8Weights` keeps the
engine's float32 model as the one weights are loaded into (the trainer's copy, unchanged) and
runs a second copy whose every `nn.Linear` is an `Int8Linear`: the weight rounded to int8 with a
scale per output row, and each call's activations rounded to int8 with a scale per token, their
product taken in int32 by `torch._int_mm` (oneDNN's VNNI/AMX kernels: about 4-5x float32's
matmul here). Rounding activations alone moved SmolLM2 too far (KL 0.05 nats a token; the MLP's
down and the value projections above all), because a few input columns carry outliers that set
every token's scale. So, as in LLM.int8(), the call's largest columns (the 1/16 with the largest
magnitude over its tokens) are taken out before rounding and multiplied in float32 with their
dequantized weight rows: on SmolLM2 float32's greedy token kept 0.968 of the time given its
prefix (0.955 with 1/32; weight-only rounding also 0.968), KL 0.011 nats a token
(`bench/real_model.py`). After each weight load
the int8 weights are made again from the float32 ones (`refresh`). The trainer stays float32;
`algorithm.off_policy = "decoupled"` absorbs the gap. CPU and float32 engines only.
"""

from __future__ import annotations

import copy
import math

import torch
from torch import nn

from tempering.models import Decoder

OUTLIER_SHARE = 1 / 16  # of a call's input columns, multiplied in float32 (see the docstring)


class Int8Linear(nn.Module):
    """y = x @ (weight * scale).T + bias, with x rounded to int8 per token outside its largest
    columns: weight int8 stored [in, out] (as `torch._int_mm` takes it), scale [out]."""

    def __init__(self, linear: nn.Linear):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.outliers = min(self.in_features, math.ceil(self.in_features * OUTLIER_SHARE))
        self.register_buffer("weight_int8", torch.empty(self.in_features, self.out_features, dtype=torch.int8))
        self.register_buffer("scale", torch.empty(self.out_features))
        self.bias = None if linear.bias is None else nn.Parameter(linear.bias.detach().clone(), requires_grad=False)
        self.set(linear.weight, linear.bias)

    @torch.no_grad()
    def set(self, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
        """Round `weight` to int8 with one symmetric scale per output row."""
        w = weight.detach().float()
        self.scale.copy_((w.abs().amax(dim=1) / 127.0).clamp_min(1e-30))
        self.weight_int8.copy_(torch.round(w / self.scale[:, None]).clamp_(-127, 127).T)
        if bias is not None:
            self.bias.copy_(bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, self.in_features).float()
        cols = flat.abs().amax(dim=0).topk(self.outliers, sorted=False).indices
        rest = flat.index_fill(1, cols, 0.0)
        step = rest.abs().amax(dim=1, keepdim=True).clamp_min_(1e-30).div_(127.0)
        y = torch._int_mm(torch.round(rest / step).to(torch.int8), self.weight_int8).float().mul_(step)
        y.addmm_(flat[:, cols], self.weight_int8[cols].float()).mul_(self.scale)
        if self.bias is not None:
            y.add_(self.bias)
        return y.reshape(*x.shape[:-1], self.out_features)


class Int8Weights:
    def __init__(self, master: Decoder):
        weight = next(master.parameters())
        if weight.device.type != "cpu" or weight.dtype != torch.float32:
            raise ValueError("engine.weights = 'int8' needs a float32 model on the CPU (engine.dtype 'auto' or "
                             "'float32')")
        self.master = master
        self.model: Decoder = copy.deepcopy(master).eval()
        for name, module in list(self.model.named_modules()):
            if isinstance(module, nn.Linear):
                parent, _, leaf = name.rpartition(".")
                setattr(self.model.get_submodule(parent) if parent else self.model, leaf, Int8Linear(module))

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
