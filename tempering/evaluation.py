"""Held-out evaluation results: greedy episodes of fixed tasks, scored by the same verifiers.

The rollout worker runs the episodes (one greedy sample per task, through the same episode
runner as training, so multi-turn tasks are evaluated as they are trained); `summarize` turns
the scored groups into accuracy: the mean `outcome` component per domain and overall (every
domain weighted by its number of tasks). A failed verifier counts as wrong here and is reported
separately.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Sequence

from tempering.records import Group, Task


@dataclass
class EvalResult:
    accuracy: float
    per_domain: dict[str, float]
    failed: int
    examples: list[dict] = field(default_factory=list)


def summarize(tasks: Sequence[Task], groups: Sequence[Group]) -> EvalResult:
    """`groups[i]` is the scored episode of `tasks[i]`."""
    rewards = [g.rewards[0] for g in groups]
    by_domain: dict[str, list[float]] = defaultdict(list)
    for task, r in zip(tasks, rewards):
        by_domain[task.domain].append(r.outcome)
    scores = [r.outcome for r in rewards]
    examples = [{"domain": t.domain, "prompt": t.prompt, "answer": t.answer, "output": g.trajectories[0].text,
                 "finish_reason": g.trajectories[0].finish_reason, "reason": r.reason}
                for t, g, r in list(zip(tasks, groups, rewards))[:: max(1, len(tasks) // 12)]]
    return EvalResult(accuracy=sum(scores) / max(len(scores), 1),
                      per_domain={d: sum(v) / len(v) for d, v in by_domain.items()},
                      failed=sum(r.failed for r in rewards), examples=examples)
