"""LoRA adapters on a `Decoder`'s linear layers, applied from outside (`apply_lora`).

Each target `nn.Linear` (by its leaf name: q_proj, ..., down_proj) becomes a `LoRALinear`: the
base layer frozen, plus `lora_B @ lora_A` scaled by alpha / rank, with A initialised as PEFT
does (Kaiming-uniform) and B zero, so the adapted model starts equal to the base. Only the
adapters are parameters that train (and carry optimizer state). `merged_state_dict` gives the
weights under the base model's names with every adapter folded in: what engines load and HF
checkpoints hold (`Merged` is the model seen that way). `adapters_off` runs the base model
itself, which is the KL reference without a second copy in memory. `save_peft` / `load_peft`
write and read PEFT's layout (`adapter_model.safetensors` + `adapter_config.json`), so `peft`
loads the adapters too. It knows nothing of training or sync.
"""

from __future__ import annotations

import contextlib
import json
import math
from pathlib import Path
from typing import Iterator, Sequence

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from tempering.errors import UserError
from tempering.models.decoder import Decoder

TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
PREFIX = "base_model.model."  # PEFT's names: base_model.model.<module>.lora_A.weight


class LoRALinear(nn.Module):
    def __init__(self, base: nn.Linear, rank: int, alpha: float, generator: torch.Generator | None = None):
        super().__init__()
        self.base = base
        base.weight.requires_grad_(False)
        if base.bias is not None:
            base.bias.requires_grad_(False)
        self.rank, self.scale, self.enabled = rank, alpha / rank, True
        self.lora_A = nn.Parameter(torch.empty(rank, base.in_features, dtype=base.weight.dtype))
        self.lora_B = nn.Parameter(torch.zeros(base.out_features, rank, dtype=base.weight.dtype))
        bound = 1 / math.sqrt(base.in_features)  # kaiming_uniform_(a=sqrt(5)), as nn.Linear and PEFT
        with torch.no_grad():
            self.lora_A.uniform_(-bound, bound, generator=generator)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.base(x)
        if not self.enabled:
            return y
        return y + (x @ self.lora_A.T) @ self.lora_B.T * self.scale

    def merged_weight(self) -> torch.Tensor:
        return self.base.weight + (self.lora_B @ self.lora_A) * self.scale


def apply_lora(model: Decoder, rank: int, alpha: float, targets: Sequence[str] = TARGETS, seed: int = 0) -> list[str]:
    """Freeze `model` and put adapters of `rank` on its linear layers named in `targets`.
    -> the adapted modules' names, in order."""
    unknown = sorted(set(targets) - set(TARGETS))
    if unknown:
        raise UserError(f"trainer.lora_targets: {unknown} are not linear layers of the decoder (known: {TARGETS})")
    for p in model.parameters():
        p.requires_grad_(False)
    generator, names = torch.Generator().manual_seed(seed), []
    for name, module in list(model.named_modules()):
        if isinstance(module, nn.Linear) and name.rsplit(".", 1)[-1] in targets:
            parent, _, leaf = name.rpartition(".")
            setattr(model.get_submodule(parent), leaf, LoRALinear(module, rank, alpha, generator))
            names.append(name)
    return names


def adapters(model: nn.Module) -> dict[str, LoRALinear]:
    return {name: m for name, m in model.named_modules() if isinstance(m, LoRALinear)}


@torch.no_grad()
def merged_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """The state under the base model's names, every adapter folded into its weight (a model
    without adapters: its own state_dict)."""
    found = adapters(model)
    if not found:
        return model.state_dict()
    out = {}
    for key, value in model.state_dict().items():
        stem, _, leaf = key.rpartition(".")
        owner = stem.removesuffix(".base")
        if owner in found and leaf in ("lora_A", "lora_B"):
            continue
        if owner in found and stem.endswith(".base"):
            out[f"{owner}.{leaf}"] = found[owner].merged_weight() if leaf == "weight" else value
        else:
            out[key] = value
    return out


class Merged:
    """A LoRA model as engines and HF checkpoints see it: `state_dict()` merged, `arch` its own."""

    def __init__(self, model: Decoder):
        self.model, self.arch = model, model.arch

    def state_dict(self) -> dict[str, torch.Tensor]:
        return merged_state_dict(self.model)


@contextlib.contextmanager
def adapters_off(model: nn.Module) -> Iterator[None]:
    """Within: the base model's outputs (every adapter disabled)."""
    found = list(adapters(model).values())
    for m in found:
        m.enabled = False
    try:
        yield
    finally:
        for m in found:
            m.enabled = True


def save_peft(model: nn.Module, folder: str | Path, base: str = "") -> None:
    """PEFT's adapter layout: adapter_model.safetensors and adapter_config.json."""
    found = adapters(model)
    if not found:
        raise ValueError("save_peft: the model has no adapters")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tensors = {f"{PREFIX}{name}.lora_{ab}.weight": getattr(m, f"lora_{ab}").detach().contiguous().cpu()
               for name, m in found.items() for ab in ("A", "B")}
    save_file(tensors, folder / "adapter_model.safetensors", metadata={"format": "pt"})
    first = next(iter(found.values()))
    config = {"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": first.rank, "lora_alpha": first.scale * first.rank,
              "target_modules": sorted({name.rsplit(".", 1)[-1] for name in found}), "lora_dropout": 0.0,
              "bias": "none", "fan_in_fan_out": False, "inference_mode": True, "base_model_name_or_path": base}
    (folder / "adapter_config.json").write_text(json.dumps(config, indent=2))


@torch.no_grad()
def load_peft(model: nn.Module, folder: str | Path) -> None:
    """Adapter weights written by `save_peft` (or PEFT) into `model`'s adapters, which must
    be the same modules and rank."""
    found = adapters(model)
    state = load_file(Path(folder) / "adapter_model.safetensors")
    want = {f"{PREFIX}{name}.lora_{ab}.weight" for name in found for ab in ("A", "B")}
    if set(state) != want:
        raise UserError(f"{folder}: adapters do not match the model's: missing {sorted(want - set(state))[:3]}, "
                        f"unexpected {sorted(set(state) - want)[:3]}")
    for name, m in found.items():
        m.lora_A.copy_(state[f"{PREFIX}{name}.lora_A.weight"])
        m.lora_B.copy_(state[f"{PREFIX}{name}.lora_B.weight"])
