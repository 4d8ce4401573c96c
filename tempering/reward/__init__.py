"""Rewards: the service that runs each domain's verifier in batches under deadlines, and what a
verifier works with (`VerifierContext`) and returns (`Verdict`)."""

from tempering.reward.service import RewardService, Submission
from tempering.verdict import InfrastructureError, Verdict, VerifierContext

__all__ = ["RewardService", "Submission", "Verdict", "VerifierContext", "InfrastructureError"]
