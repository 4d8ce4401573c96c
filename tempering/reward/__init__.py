"""Rewards: verifiers by name, and the service that runs them in batches under deadlines."""

from tempering.reward.service import RewardService, Submission
from tempering.reward.verifiers import VERIFIERS, InfrastructureError, Verdict

__all__ = ["RewardService", "Submission", "VERIFIERS", "Verdict", "InfrastructureError"]
