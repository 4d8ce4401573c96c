"""The rollout side: episodes (`episode`), the runner that keeps groups of them in flight on one
engine (`runner`), the workspaces they act on (`environment`), the worker process that turns
the groups it is ordered into scored groups and evaluations (`worker`), and the trainer's handle
on it, which sends it what the global scheduler admits and files groups into batches (`service`)."""

from tempering.rollout.episode import Episode
from tempering.rollout.runner import EpisodeRunner
from tempering.rollout.assembler import RolloutBatch
from tempering.rollout.service import RolloutService
from tempering.rollout.worker import EvalRequest, GroupDone, RolloutSpec

__all__ = ["Episode", "EpisodeRunner", "RolloutService", "RolloutBatch", "RolloutSpec", "EvalRequest", "GroupDone"]
