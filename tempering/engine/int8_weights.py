"""`engine.weights = "int8"`: the engine's linear layers as dynamic int8 (per output channel).

Rollouts of a real model on a CPU are bound by its linear layers: at the small batches of
decoding, by reading their fp32 weights. `Int8Weights` keeps the engine's fp32 model as the one
weights are loaded into (the trainer's copy, unchanged) and runs a second copy whose every
`nn.Linear` is PyTorch's dynamic-quantized int8 Linear (fbgemm: weights int8 with a scale per
output row, activations quantized per call): a quarter of the bytes read, int8 matmuls. After each
weight load the int8 copy is made again from the fp32 one (`refresh`). The trainer stays fp32;
the gap between the engine's logprobs and the trainer's is what the off-policy correction
(`algorithm.off_policy = "decoupled"`) absorbs. CPU and float32 only.
"""

from __future__ import annotations

import copy
import warnings

import torch
from torch import nn

from tempering.models import Decoder


def _quantization():
    with warnings.catch_warnings():  # the eager-mode API is deprecated for torchao; it runs in the torch we pin
        warnings.simplefilter("ignore", DeprecationWarning)
        from torch.ao.nn.quantized.dynamic import Linear as Int8Linear
        from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic
    return Int8Linear, per_channel_dynamic_qconfig, quantize_dynamic


class Int8Weights:
    def __init__(self, master: Decoder):
        if next(master.parameters()).device.type != "cpu" or next(master.parameters()).dtype != torch.float32:
            raise ValueError("engine.weights = 'int8' needs a float32 model on the CPU (engine.dtype 'auto' or "
                             "'float32')")
        _, qconfig, quantize_dynamic = _quantization()
        self.master = master
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", (DeprecationWarning, UserWarning))
            self.model: Decoder = quantize_dynamic(copy.deepcopy(master), {nn.Linear: qconfig}, dtype=torch.qint8)
        self.model.eval()
        self.refresh()  # one rounding for the first weights and every later load

    @torch.no_grad()
    def refresh(self) -> None:
        """Make the int8 copy again from the master's weights (after a load)."""
        int8_linear, _, _ = _quantization()
        own = dict(self.model.named_modules())
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # quantized tensors' creation is deprecated too
            for name, module in self.master.named_modules():
                target = own[name]
                if isinstance(target, int8_linear):
                    target.set_weight_bias(per_channel(module.weight), module.bias)
                elif not isinstance(module, nn.Linear):
                    for p_name, p in module.named_parameters(recurse=False):
                        getattr(target, p_name).copy_(p)


def per_channel(w: torch.Tensor) -> torch.Tensor:
    """w [out, in] as qint8 with one symmetric scale per output row (what quantize_dynamic's
    per-channel config makes)."""
    scale = (w.abs().amax(dim=1) / 127.0).clamp_min(1e-12).double()
    return torch.quantize_per_channel(w.float(), scale, torch.zeros_like(scale, dtype=torch.int64), 0, torch.qint8)
