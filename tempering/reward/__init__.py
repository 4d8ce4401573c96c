"""Rewards: verifiers by name, and the service that runs them in batches under deadlines."""

from tempering.reward.service import RewardService
from tempering.reward.verifiers import VERIFIERS, InfrastructureError, Verdict

__all__ = ["RewardService", "VERIFIERS", "Verdict", "InfrastructureError"]
