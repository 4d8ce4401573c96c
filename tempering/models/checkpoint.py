"""Building models: random init from an `Arch`, or HF safetensors folders in and out.

Reads `config.json` plus `model.safetensors` or sharded `model.safetensors.index.json`; writes
the same layout, so `transformers.AutoModelForCausalLM.from_pretrained` loads our checkpoints.
Missing or unexpected tensors are errors that name them: a half-loaded model must never train.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Protocol

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from tempering.errors import UserError
from tempering.models.arch import Arch
from tempering.models.decoder import Decoder
from tempering.models.rope import inverse_frequencies


def build_model(arch: Arch, seed: int = 0) -> Decoder:
    model = Decoder(arch)
    model.init_weights(torch.Generator().manual_seed(seed))
    return model


def read_arch(folder: str | Path) -> Arch:
    folder = Path(folder)
    cfg_path = folder / "config.json"
    if not cfg_path.is_file():
        raise UserError(f"{folder}: not a model folder (no config.json)")
    try:
        return Arch.from_hf(json.loads(cfg_path.read_text()))
    except (json.JSONDecodeError, TypeError, KeyError) as e:
        raise UserError(f"{cfg_path}: cannot read the architecture: {e}") from None


def load_hf(folder: str | Path, dtype: torch.dtype = torch.float32) -> Decoder:
    folder = Path(folder)
    arch = read_arch(folder)
    with torch.device("meta"):
        model = Decoder(arch)
    state = _read_tensors(folder)
    if arch.tie_word_embeddings:
        state.pop("lm_head.weight", None)
    expected = {k for k in model.state_dict() if not (arch.tie_word_embeddings and k == "lm_head.weight")}
    missing, unexpected = sorted(expected - set(state)), sorted(set(state) - expected)
    # Rotary caches some exporters store are derived, not learned.
    unexpected = [k for k in unexpected if not k.endswith("rotary_emb.inv_freq")]
    if missing or unexpected:
        raise UserError(f"{folder}: checkpoint does not match the {arch.model_type} architecture: "
                         f"missing {missing[:5]}, unexpected {unexpected[:5]}")
    model.load_state_dict({k: v.to(dtype) for k, v in state.items() if k in expected}, strict=False, assign=True)
    if arch.tie_word_embeddings:
        model.lm_head.weight = model.model.embed_tokens.weight
    model.inv_freq = inverse_frequencies(arch)  # built on meta above; derived, never stored
    return model


def _read_tensors(folder: Path) -> dict[str, torch.Tensor]:
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        try:
            shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as e:
            raise UserError(f"{index}: not a safetensors index ({e})") from None
        state: dict[str, torch.Tensor] = {}
        for shard in shards:
            state.update(_load(folder / shard))
        return state
    single = folder / "model.safetensors"
    if not single.is_file():
        raise UserError(f"{folder}: no model.safetensors or model.safetensors.index.json")
    return _load(single)


def _load(path: Path) -> dict[str, torch.Tensor]:
    if not path.is_file():
        raise UserError(f"{path}: missing shard")
    try:
        return load_file(path)
    except SafetensorError as e:
        raise UserError(f"{path}: not a readable safetensors file ({e})") from None


class Weights(Protocol):
    """What `save_hf` writes: a `Decoder`, or a view of one (`lora.Merged`)."""

    arch: Arch

    def state_dict(self) -> dict[str, torch.Tensor]: ...


def save_hf(model: Weights, folder: str | Path) -> None:
    """Write config.json and model.safetensors (tied lm_head stored once, as HF does)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
    if model.arch.tie_word_embeddings:
        state.pop("lm_head.weight", None)
    save_file(state, folder / "model.safetensors", metadata={"format": "pt"})
    (folder / "config.json").write_text(json.dumps(model.arch.to_hf(), indent=2))
