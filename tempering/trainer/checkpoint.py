"""Run checkpoints: the model in HF format plus what `--resume` needs to continue exactly.

A checkpoint folder holds `model/` (config.json + model.safetensors + tokenizer, loadable by
transformers), `trainer.pt` (optimizer and LR schedule), `rng.pt` (Python, NumPy and torch RNG
states) and `state.json` (step, version, counters, the baseline evaluation). It is written to a
temporary folder and renamed, so an interrupted save never leaves a half checkpoint as latest.
"""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

from tempering.models import Decoder, load_hf, save_hf
from tempering.tokenizer import Tokenizer


def save_checkpoint(run_dir: Path, model: Decoder, tokenizer: Tokenizer, trainer_state: dict,
                    state: dict[str, Any]) -> Path:
    root = run_dir / "checkpoints"
    final = root / f"step-{state['step']:06d}"
    tmp = root / f".tmp-{final.name}"
    shutil.rmtree(tmp, ignore_errors=True)
    save_hf(model, tmp / "model")
    tokenizer.save(tmp / "model")
    torch.save(trainer_state, tmp / "trainer.pt")
    torch.save({"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()},
               tmp / "rng.pt")
    (tmp / "state.json").write_text(json.dumps(state, indent=2))
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
    (root / "latest").write_text(final.name)
    return final


def latest_checkpoint(run_dir: Path) -> Path | None:
    pointer = run_dir / "checkpoints" / "latest"
    if not pointer.is_file():
        return None
    path = run_dir / "checkpoints" / pointer.read_text().strip()
    return path if path.is_dir() else None


def load_checkpoint(path: Path) -> tuple[Decoder, dict, dict[str, Any]]:
    """-> model, trainer state, run state; restores the RNG states as a side effect."""
    model = load_hf(path / "model")
    trainer_state = torch.load(path / "trainer.pt", weights_only=False)
    rng = torch.load(path / "rng.pt", weights_only=False)
    random.setstate(rng["python"])
    np.random.set_state(rng["numpy"])
    torch.set_rng_state(rng["torch"])
    return model, trainer_state, json.loads((path / "state.json").read_text())
