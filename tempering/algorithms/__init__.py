"""Advantages and policy losses as pure functions in registries, chosen by name in config."""

from tempering.algorithms.advantages import ADVANTAGES, get_advantage
from tempering.algorithms.losses import LOSSES, LossSpec, get_loss

__all__ = ["ADVANTAGES", "LOSSES", "LossSpec", "get_advantage", "get_loss"]
