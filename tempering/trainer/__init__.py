"""The trainer: RL and SFT steps on the shared decoder, and run checkpoints."""

from tempering.trainer.step import StepStats, Trainer, token_logprobs

__all__ = ["Trainer", "StepStats", "token_logprobs"]
