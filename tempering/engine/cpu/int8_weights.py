"""`engine.weights = "int8"`: the engine's linear layers with int8 weights (one scale per output row).

Rollouts of a real model on a CPU are bound by its linear layers: at the small batches of
decoding, by reading their float32 weights. `Int8Weights` keeps the engine's float32 model as the
one weights are loaded into (the trainer's copy, unchanged) and runs a second copy whose every
`nn.Linear` is an `Int8Linear`: the weight rounded to int8 per output row, activations left in
float32, the product taken by `int8_linear.c` (each weight widened as it is loaded: a quarter of
the bytes read, float32 sums of exactly the dequantized weights). Only the weights are rounded:
activation quantization (fbgemm's dynamic int8) was tried and moved SmolLM2's greedy tokens too
far (0.30 of 32 agreed with float32), outliers in the MLP's down projection above all. After each
weight load the int8 weights are made again from the float32 ones (`refresh`). The trainer stays
float32; `algorithm.off_policy = "decoupled"` absorbs the gap. CPU and float32 only; without a C
compiler the products run through PyTorch on dequantized weights (slow, and warned once).
"""

from __future__ import annotations

import copy
import ctypes
import functools
from pathlib import Path

import torch
from torch import nn

from tempering.engine.cpu import native
from tempering.models import Decoder

SOURCE = Path(__file__).with_name("int8_linear.c")
MIN_COLUMNS_PER_THREAD = 64  # below this a thread's share of output rows is not worth the hand-off


class _Args(ctypes.Structure):
    """int8_linear.c's Args."""
    _fields_ = [(name, ctypes.c_void_p) for name in ("x", "w", "scale", "bias", "y")] + [
        (name, ctypes.c_int64) for name in ("m", "k", "n")]


@functools.lru_cache(maxsize=1)
def _kernel():
    return native.rows_function(SOURCE, "int8_linear", _Args, "int8 linear layers run on dequantized weights (slow)")


class Int8Linear(nn.Module):
    """y = x @ (weight * scale).T + bias: weight int8 [out, in], scale [out], x float32."""

    def __init__(self, linear: nn.Linear):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.register_buffer("weight_int8", torch.empty(self.out_features, self.in_features, dtype=torch.int8))
        self.register_buffer("scale", torch.empty(self.out_features))
        self.bias = None if linear.bias is None else nn.Parameter(linear.bias.detach().clone(), requires_grad=False)
        self.set(linear.weight, linear.bias)

    @torch.no_grad()
    def set(self, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
        """Round `weight` to int8 with one symmetric scale per output row."""
        w = weight.detach().float()
        self.scale.copy_((w.abs().amax(dim=1) / 127.0).clamp_min(1e-30))
        self.weight_int8.copy_(torch.round(w / self.scale[:, None]).clamp_(-127, 127))
        if bias is not None:
            self.bias.copy_(bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, self.in_features).float().contiguous()
        kernel = _kernel()
        if kernel is None:
            y = flat @ (self.weight_int8.float() * self.scale[:, None]).T
            return (y if self.bias is None else y + self.bias).reshape(*x.shape[:-1], self.out_features)
        y = torch.empty(flat.shape[0], self.out_features)
        args = _Args(flat.data_ptr(), self.weight_int8.data_ptr(), self.scale.data_ptr(),
                     self.bias.data_ptr() if self.bias is not None else None, y.data_ptr(),
                     flat.shape[0], self.in_features, self.out_features)
        parts = max(1, min(torch.get_num_threads(), self.out_features // MIN_COLUMNS_PER_THREAD))
        native.split_rows(lambda _, lo, hi: kernel(ctypes.byref(args), None, lo, hi), self.out_features, parts,
                          "int8 linear")
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
