"""Advantages, policy objectives, token aggregations, KL estimators and reward shaping as pure
functions in registries, chosen by name in config (`[algorithm]`)."""

from tempering.algorithms.advantages import ADVANTAGE_NAMES, ADVANTAGES, AdvantageSpec, get_advantage
from tempering.algorithms.aggregation import AGGREGATIONS, get_aggregation
from tempering.algorithms.losses import KL_ESTIMATORS, OBJECTIVES, PolicyLoss, get_objective
from tempering.algorithms.shaping import Overlong

__all__ = ["ADVANTAGES", "ADVANTAGE_NAMES", "AGGREGATIONS", "AdvantageSpec", "KL_ESTIMATORS", "OBJECTIVES",
           "Overlong", "PolicyLoss", "get_advantage", "get_aggregation", "get_objective"]
