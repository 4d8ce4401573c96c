"""`GroupKey`: what a group of episodes is for, carried from `EpisodeRunner.start` to the scored
group it hands back and onto every sandbox execution of its samples (`tag`).

A group is one order of a training batch (`train`), part of an evaluation (`evaluation`), or
something outside training named by where it came from (a served agent run, a check, an SFT
transcript, a benchmark: `GroupKey(source)`). The runner carries it untouched; the worker routes
a scored group by it, and the sandbox log joins an execution to its sample, batch or evaluation
by its tag. It decides nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass

from tempering.records import Task
from tempering.sandbox.request import ExecTag

TRAIN, EVAL = "train", "eval"


@dataclass(frozen=True)
class GroupKey:
    source: str  # TRAIN, EVAL, or what started the group ("serve", "check", "sft", "bench", ...)
    batch: int | None = None  # TRAIN: the rollout batch
    order: int | None = None  # TRAIN: the group's order id
    label: str = ""  # EVAL: the evaluation ("baseline", "final", "step-000010")
    index: int = 0  # anything else: which of the caller's groups

    @classmethod
    def train(cls, batch: int, order: int) -> GroupKey:
        return cls(TRAIN, batch=batch, order=order)

    @classmethod
    def evaluation(cls, label: str) -> GroupKey:
        return cls(EVAL, label=label)

    def tag(self, task: Task, index: int, tenant: str = "") -> ExecTag:
        """What joins a sandbox execution of sample `index` of this group to its sample (and its
        batch or evaluation) in sandbox.jsonl; `tenant` names a served agent run's tenant."""
        return ExecTag(sample=f"{task.id}/{index}", batch=self.batch if self.source == TRAIN else None,
                       eval=self.label if self.source == EVAL else "", domain=task.domain, tenant=tenant)
