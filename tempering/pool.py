"""`TaskPool`: draws training tasks from the domain mix and keeps the held-out split apart.

The mix (`tasks.weights`) may name domains, families or globs (`registry.resolve_weights`);
domains are drawn in proportion to their weights. A generator domain's tasks come from a seeded
RNG, and a stable hash of the task (its prompt, environment and data reference) puts 1 in 10
into the held-out split, which training never draws. A dataset domain has its own split: its
training tasks are drawn without replacement, in a fresh shuffled order each epoch. A domain
with difficulty levels is drawn at the level asked for; held-out tasks are of its top level, SFT
examples of every level. Plugins (`tasks.plugins`) are loaded first, in every process that
builds a pool. Which domain is drawn next, and at which level, is the global scheduler's
decision (`tempering.scheduler.global_`, which owns the pool); the pool only draws. A training
draw is a `TaskDraw`: a dataset's task is chosen at once, a generator's is made from the draw's
seed by whoever calls `make` (the rollout worker), since generating a task can cost more than
the trainer's step on it and belongs where the episodes run.
"""

from __future__ import annotations

import dataclasses
import hashlib
import random
from dataclasses import dataclass

from tempering.config import TasksConfig
from tempering.errors import UserError
from tempering.records import Task
from tempering.tasks import Domain, get_domain, load_plugins, resolve_weights


def _digest(task: Task) -> str:
    # The environment and the data reference are part of a task's identity: one prompt can
    # name different workspaces or documents.
    env = f"|{task.environment}" if task.environment is not None else ""
    ref = f"|{task.ref}" if task.ref else ""
    return hashlib.sha1(f"{task.domain}|{task.prompt}{env}{ref}".encode()).hexdigest()


def is_heldout(task: Task) -> bool:
    return int(_digest(task)[:8], 16) % 10 == 0


def with_id(task: Task) -> Task:
    return task if task.id else dataclasses.replace(task, id=f"{task.domain}-{_digest(task)[:12]}")


@dataclass(frozen=True)
class TaskDraw:
    """A training task chosen: `task` itself (a dataset's), or how to make it (a generator's
    domain, level and seed; `make` gives the same task in any process)."""

    domain: str
    level: int | None = None
    seed: int = 0
    task: Task | None = None

    def make(self) -> Task:
        if self.task is not None:
            return self.task
        return _draw(get_domain(self.domain), random.Random(self.seed), heldout=False, level=self.level)


def _draw(domain: Domain, rng: random.Random, heldout: bool, level: int | None = None) -> Task:
    for _ in range(1000):
        task = domain.generate(rng, level)
        if is_heldout(task) == heldout:
            return with_id(task)
    raise UserError(f"domain {domain.name}: 1000 draws gave no {'held-out' if heldout else 'training'} task (1 "
                    "task in 10, by its hash, is held out): its tasks are too few or all alike; give it more "
                    "variety, or make it a dataset with its own split")


class TaskPool:
    def __init__(self, cfg: TasksConfig, seed_offset: int = 0):
        self.cfg = cfg
        load_plugins(cfg.plugins)
        self.weights = resolve_weights(cfg.weights)
        self.domains: dict[str, Domain] = {name: get_domain(name) for name in self.weights}
        self.rng = random.Random(cfg.seed + seed_offset)
        self._orders: dict[str, list[Task]] = {}  # dataset domains: training tasks left this epoch

    @property
    def alphabet(self) -> str:
        return "".join(sorted({c for d in self.domains.values() for c in d.alphabet}))

    @property
    def needs_sandbox(self) -> bool:
        return any(d.sandbox for d in self.domains.values())

    @property
    def needs_toolchain(self) -> bool:
        return any(d.sandbox and d.toolchain for d in self.domains.values())

    @property
    def levels(self) -> dict[str, int]:
        return {name: d.levels for name, d in self.domains.items()}

    def next_tasks(self, k: int) -> list[Task]:
        """`k` training tasks of domains drawn by weight (for tools and tests; a run's domains
        are the scheduler's choice, through `next_task`)."""
        names = list(self.domains)
        weights = [self.weights[n] for n in names]
        return [self.next_task(self.rng.choices(names, weights)[0]) for _ in range(k)]

    def heldout(self) -> list[Task]:
        """The evaluation set: the same tasks every time for a given config."""
        rng = random.Random(self.cfg.seed ^ 0x5EED)
        out = []
        for name, d in self.domains.items():
            if d.is_dataset:
                out += [with_id(t) for t in d.load("heldout")[: self.cfg.eval_per_domain]]
            else:
                out += [self._draw(rng, name, heldout=True) for _ in range(self.cfg.eval_per_domain)]
        return out

    def sft_examples(self) -> list[Task]:
        """Training-split tasks with reference completions, for SFT warm-up."""
        rng = random.Random(self.cfg.seed ^ 0xC0FFEE)
        out = []
        for name, d in self.domains.items():
            if d.is_dataset:
                out += [with_id(t) for t in d.load("train")[: self.cfg.sft_per_domain]]
            else:
                # a level only for domains that have them: others keep the draws they always had
                out += [self._draw(rng, name, heldout=False, level=rng.randrange(d.levels) if d.levels > 1 else None)
                        for _ in range(self.cfg.sft_per_domain)]
        return [t for t in out if t.reference is not None]

    def next_task(self, name: str, level: int | None = None) -> Task:
        """A training task of domain `name` (at `level`; None: its top level)."""
        return self.next_draw(name, level).make()

    def next_draw(self, name: str, level: int | None = None) -> TaskDraw:
        """The next training task of domain `name` (at `level`), made or to be made."""
        domain = self.domains[name]
        if not domain.is_dataset:
            return TaskDraw(name, level, self.rng.getrandbits(63))
        if not self._orders.get(name):  # a new epoch: every training task once more, in a new order
            tasks = list(domain.load("train"))
            if not tasks:
                raise RuntimeError(f"domain {name}: its training split is empty")
            self.rng.shuffle(tasks)
            self._orders[name] = tasks
        return TaskDraw(name, task=with_id(self._orders[name].pop()))

    def _draw(self, rng: random.Random, name: str, heldout: bool, level: int | None = None) -> Task:
        return _draw(self.domains[name], rng, heldout, level)
