"""The trainer's learning-rate schedule: linear warm-up, then constant or cosine decay."""

from __future__ import annotations

import math

import torch

from tempering.config import TrainerConfig


def lr_factor(cfg: TrainerConfig, step: int, total_steps: int) -> float:
    """Linear warm-up to 1, then constant or cosine down to `min_lr_ratio` at `total_steps`."""
    if step < cfg.warmup_steps:
        return (step + 1) / cfg.warmup_steps
    if cfg.schedule == "constant" or total_steps <= cfg.warmup_steps:
        return 1.0
    progress = min(1.0, (step - cfg.warmup_steps) / (total_steps - cfg.warmup_steps))
    return cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


def lr_scheduler(optimizer: torch.optim.Optimizer, cfg: TrainerConfig, total_steps: int) -> torch.optim.lr_scheduler.LambdaLR:
    """`lr_factor` of `optimizer`'s LR, stepped once per batch."""
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: lr_factor(cfg, s, total_steps))
