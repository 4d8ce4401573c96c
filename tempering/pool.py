"""`TaskPool`: draws training tasks from the domain mix and keeps the held-out split apart.

Domains are drawn in proportion to `tasks.weights`; each task is generated procedurally from a
seeded RNG, so the pool is reproducible and its state is one RNG. A stable hash of the prompt
puts 1 task in 10 into the held-out split, which training never draws. Pass rates per domain
are tracked for metrics and for the scheduler. Priorities and curricula are not here yet.
"""

from __future__ import annotations

import dataclasses
import hashlib
import random
from collections import defaultdict

from tempering.config import TasksConfig
from tempering.records import Task
from tempering.tasks import get_domain


def _digest(task: Task) -> str:
    # The environment is part of a task's identity: one prompt can name different workspaces.
    env = f"|{task.environment}" if task.environment is not None else ""
    return hashlib.sha1(f"{task.domain}|{task.prompt}{env}".encode()).hexdigest()


def is_heldout(task: Task) -> bool:
    return int(_digest(task)[:8], 16) % 10 == 0


def with_id(task: Task) -> Task:
    return dataclasses.replace(task, id=f"{task.domain}-{_digest(task)[:12]}")


class TaskPool:
    def __init__(self, cfg: TasksConfig, seed_offset: int = 0):
        self.cfg = cfg
        self.domains = {name: get_domain(name) for name in cfg.weights}
        self.rng = random.Random(cfg.seed + seed_offset)
        self.passed: dict[str, float] = defaultdict(float)
        self.seen: dict[str, int] = defaultdict(int)

    @property
    def alphabet(self) -> str:
        return "".join(sorted({c for d in self.domains.values() for c in d.alphabet}))

    @property
    def needs_sandbox(self) -> bool:
        return any(d.sandbox for d in self.domains.values())

    def next_tasks(self, k: int) -> list[Task]:
        names = list(self.domains)
        weights = [self.cfg.weights[n] for n in names]
        return [self._draw(self.rng, self.rng.choices(names, weights)[0], heldout=False) for _ in range(k)]

    def heldout(self) -> list[Task]:
        """The evaluation set: the same tasks every time for a given config."""
        rng = random.Random(self.cfg.seed ^ 0x5EED)
        return [self._draw(rng, name, heldout=True) for name in self.domains for _ in range(self.cfg.eval_per_domain)]

    def sft_examples(self) -> list[Task]:
        """Training-split tasks with reference completions, for SFT warm-up."""
        rng = random.Random(self.cfg.seed ^ 0xC0FFEE)
        out = [self._draw(rng, name, heldout=False) for name in self.domains for _ in range(self.cfg.sft_per_domain)]
        return [t for t in out if t.reference is not None]

    def record(self, domain: str, outcomes: list[float]) -> None:
        self.passed[domain] += sum(outcomes)
        self.seen[domain] += len(outcomes)

    def pass_rates(self) -> dict[str, float]:
        return {d: self.passed[d] / self.seen[d] for d in self.seen if self.seen[d]}

    def _draw(self, rng: random.Random, name: str, heldout: bool) -> Task:
        domain = self.domains[name]
        for _ in range(1000):
            task = domain.make(rng)
            if is_heldout(task) == heldout:
                return with_id(task)
        raise RuntimeError(f"domain {name}: could not draw a {'held-out' if heldout else 'training'} task")
