"""The rollout side: episodes (`episode`), the runner that keeps groups of them in flight on one
engine (`runner`), the workspaces they act on (`environment`), the worker process that turns
them into batches and evaluations (`worker`), and the trainer's handle on it (`service`)."""

from tempering.rollout.episode import Episode
from tempering.rollout.runner import EpisodeRunner
from tempering.rollout.service import RolloutService
from tempering.rollout.worker import EvalRequest, RolloutBatch, RolloutSpec

__all__ = ["Episode", "EpisodeRunner", "RolloutService", "RolloutBatch", "RolloutSpec", "EvalRequest"]
