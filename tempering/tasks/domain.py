"""`Domain`: a kind of task, everything the system needs to train on it.

A domain is either a generator (`make(rng)` returns a fresh task; a domain with `levels` > 1
takes `make(rng, level)`, level 0 the easiest and `levels - 1` the difficulty it is evaluated
at) or a finite dataset
(`load(split)` returns its "train" or "heldout" tasks; the pool draws the training ones without
replacement, epoch after epoch). It owns its check (`verify`: the task, the sample, a
`VerifierContext` -> a `Verdict`), the tools its episodes may call beyond the common ones, and,
when those tools act on something other than files (a 3D scene, a document), `open_host`,
which makes the per-episode object they act on; the verifier then receives that object's final
state as `ctx.workspace`. A task carries its data by reference (`Task.ref`, `Task.environment`):
the domain rebuilds what it needs from it, in whichever process needs it.

Names are `family/name` (or a bare name, its own family): one module may register a whole
family. `heavy` verifiers (mesh booleans, PDF parsing) run in a process that a deadline can
kill; the others in a thread. For reward models and judges (`tempering.reward.graders`), a
domain may give `rubric`, its own grading criteria (used by judges configured with rubric
"domain"), and `grade_item`, what graders see of a sample (e.g. a part's measurements and
silhouettes rather than the agent's last words); without it they see the final answer. `alphabet` exists for the demo's character tokenizer only: the
characters a domain's text uses, "" for domains that need a real tokenizer. It does not hold or
look up domains: `tempering.tasks.registry` does.
"""

from __future__ import annotations

import inspect
import random
import re
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

from tempering.records import Task, Trajectory
from tempering.sandbox import Sandbox
from tempering.tasks.host import Tool, ToolHost
from tempering.verdict import JudgeItem, Verifier, VerifierContext

def _accepts(fn: Callable, n: int) -> bool:
    """Whether `fn` can be called with `n` positional arguments."""
    try:
        inspect.signature(fn).bind(*[None] * n)
    except TypeError:
        return False
    except ValueError:  # no signature to read (a builtin): let the call decide
        return True
    return True


NAME = re.compile(r"[a-z0-9][a-z0-9_.-]*(/[a-z0-9][a-z0-9_.-]*)?")
SPLITS = ("train", "heldout")


@dataclass(frozen=True)
class Domain:
    name: str
    description: str
    verify: Verifier
    make: Callable[..., Task] | None = None  # (rng) -> task, or (rng, level) -> task when levels > 1
    load: Callable[[str], Sequence[Task]] | None = None
    tools: Mapping[str, Tool] = field(default_factory=dict)  # name -> tool, beyond the common ones
    open_host: Callable[[Task], ToolHost] | None = None  # the per-episode object its tools act on
    sandbox: bool = False  # its episodes or its verifier run code: a run starts the sandbox for it
    # its sessions use the sandbox toolchain (pytest, installer shims): a mix with no such domain
    # runs its sandbox without one, so a missing or unreadable toolchain cannot stop it
    toolchain: bool = True
    heavy: bool = False  # its verifier runs in a process a deadline can kill
    alphabet: str = ""
    levels: int = 1  # difficulty levels of a generator (the scheduler's curriculum moves through them)
    # its own oracle and no-op check, for tasks whose oracle is not a reference answer (a terminal
    # task's solution script): (task, sandbox) -> (oracle outcome, no-op outcome)
    check: Callable[[Task, Sandbox], tuple[float, float]] | None = None
    rubric: str = ""  # its own criteria for judges whose rubric is "domain"; "" = none
    # what reward models and judges grade: (task, sample, context with the final workspace) -> item
    grade_item: Callable[[Task, Trajectory, VerifierContext], JudgeItem] | None = None

    def __post_init__(self) -> None:
        if not NAME.fullmatch(self.name):
            raise ValueError(f"domain name {self.name!r}: lowercase letters, digits, '_', '.', '-', "
                             "with at most one '/' between a family and a name")
        if (self.make is None) == (self.load is None):
            raise ValueError(f"domain {self.name}: give exactly one of make (a generator) or load (a dataset)")
        if type(self.levels) is not int or self.levels < 1 or (self.levels > 1 and self.make is None):
            raise ValueError(f"domain {self.name}: levels must be an integer >= 1, and > 1 only for a generator; "
                             f"got {self.levels!r}")
        if self.levels > 1 and not _accepts(self.make, 2):
            raise ValueError(f"domain {self.name}: it has {self.levels} levels, so make must take (rng, level)")

    def generate(self, rng: random.Random, level: int | None = None) -> Task:
        """A fresh task at `level` (None: the top level, the one evaluated)."""
        if self.levels == 1:
            return self.make(rng)
        level = self.levels - 1 if level is None else level
        if not 0 <= level < self.levels:
            raise ValueError(f"domain {self.name}: level {level} outside 0..{self.levels - 1}")
        return self.make(rng, level)

    @property
    def family(self) -> str:
        return self.name.split("/", 1)[0]

    @property
    def is_dataset(self) -> bool:
        return self.load is not None
