"""Held-out evaluation: greedy answers to fixed tasks, scored by the same verifiers.

Accuracy is the mean `outcome` component per domain and overall (every domain weighted by its
number of tasks). A failed verifier counts as wrong here and is reported separately.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Sequence

from tempering.engine import LLM, SamplingParams
from tempering.records import Task
from tempering.reward import RewardService
from tempering.rollout import generate_trajectories
from tempering.tokenizer import Tokenizer


@dataclass
class EvalResult:
    accuracy: float
    per_domain: dict[str, float]
    failed: int
    examples: list[dict] = field(default_factory=list)


def evaluate(engine: LLM, tokenizer: Tokenizer, reward: RewardService, tasks: Sequence[Task],
             max_tokens: int) -> EvalResult:
    samples = generate_trajectories(engine, tokenizer, tasks, SamplingParams(temperature=0, max_tokens=max_tokens))
    rewards = reward.score([(task, group[0]) for task, group in zip(tasks, samples)])
    by_domain: dict[str, list[float]] = defaultdict(list)
    for task, r in zip(tasks, rewards):
        by_domain[task.domain].append(r.outcome)
    scores = [r.outcome for r in rewards]
    examples = [{"domain": t.domain, "prompt": t.prompt, "answer": t.answer, "output": g[0].text, "reason": r.reason}
                for t, g, r in list(zip(tasks, samples, rewards))[:: max(1, len(tasks) // 12)]]
    return EvalResult(accuracy=sum(scores) / max(len(scores), 1),
                      per_domain={d: sum(v) / len(v) for d, v in by_domain.items()},
                      failed=sum(r.failed for r in rewards), examples=examples)
