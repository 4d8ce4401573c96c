"""Run checkpoints: the model in HF format plus what `--resume` needs to continue exactly.

A checkpoint folder holds `model/` (config.json + model.safetensors + tokenizer, loadable by
transformers; with LoRA the adapters merged in, and `adapter/` beside it in PEFT's layout), `trainer.pt` (optimizer and LR schedule), `rng.pt` (Python, NumPy and torch RNG
states) and `state.json` (step, version, counters, the baseline evaluation). It is written to a
temporary folder and renamed, so an interrupted save never leaves a half checkpoint as latest.
A sharded checkpoint (trainer ranks with `runtime.checkpoint_format = "sharded"`) holds, in
place of `trainer.pt`, what `distributed.write_shards` writes: every rank's shards of the model,
optimizer and reference, and the LR schedule; `model/` is still the full model, so every
checkpoint folder has one that transformers loads.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from tempering.jsonvalue import JSONObject
from tempering.models import Decoder, load_hf, save_hf
from tempering.models.lora import Merged, adapters, save_peft
from tempering.tokenizer import Tokenizer


def save_checkpoint(run_dir: Path, model: Decoder, tokenizer: Tokenizer, trainer_state: dict | None,
                    state: JSONObject, shards: Callable[[Path], None] | None = None) -> Path:
    """`trainer_state` (`Trainer.state_dict`) goes to `trainer.pt`; or, when it is None, `shards`
    writes the trainer's state into the folder (`TrainerGroup.save`, which every rank joins)."""
    root = run_dir / "checkpoints"
    final = root / f"step-{state['step']:06d}"
    tmp = root / f".tmp-{final.name}"
    shutil.rmtree(tmp, ignore_errors=True)
    if adapters(model):  # LoRA: the merged model for transformers, the adapters in PEFT's layout for peft
        save_hf(Merged(model), tmp / "model")
        save_peft(model, tmp / "adapter")
    else:
        save_hf(model, tmp / "model")
    tokenizer.save(tmp / "model")
    if trainer_state is not None:
        torch.save(trainer_state, tmp / "trainer.pt")
    else:
        assert shards is not None, "save_checkpoint: the trainer's state, or what writes its shards"
        shards(tmp)
    torch.save({"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()},
               tmp / "rng.pt")
    (tmp / "state.json").write_text(json.dumps(state, indent=2))
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
    point_latest(root, final.name)
    return final


def point_latest(root: Path, name: str) -> None:
    """Write the `latest` pointer by rename, so a kill mid-write never leaves it empty or torn."""
    tmp = root / ".latest.tmp"
    tmp.write_text(name)
    os.replace(tmp, root / "latest")


def latest_checkpoint(run_dir: Path) -> Path | None:
    """The folder `latest` names; if the pointer is missing, unreadable or names a folder that is
    gone (a kill between removing an old copy and renaming the new one), the newest complete
    `step-*` folder (complete: its state.json was written before the rename)."""
    root = run_dir / "checkpoints"
    pointer = root / "latest"
    name = pointer.read_text().strip() if pointer.is_file() else ""
    if name.startswith("step-") and (root / name / "state.json").is_file():
        return root / name
    done = sorted(p for p in root.glob("step-*") if (p / "state.json").is_file()) if root.is_dir() else []
    return done[-1] if done else None


def load_checkpoint(path: Path) -> tuple[Decoder, dict | None, JSONObject]:
    """-> model, trainer state (None for a sharded checkpoint: `distributed.read_shards` reads it),
    run state; restores the RNG states as a side effect."""
    model = load_hf(path / "model")
    trainer_state = torch.load(path / "trainer.pt", weights_only=False) if (path / "trainer.pt").is_file() else None
    rng = torch.load(path / "rng.pt", weights_only=False)
    random.setstate(rng["python"])
    np.random.set_state(rng["numpy"])
    torch.set_rng_state(rng["torch"])
    return model, trainer_state, json.loads((path / "state.json").read_text())
