"""An example dataset domain, `example/units`: unit conversions read from a file, with its split.

A dataset domain gives `load(split)` instead of `make(rng)`: it returns the "train" or "heldout"
tasks, and the pool draws the training ones without replacement, epoch after epoch, and
evaluates on exactly the held-out ones (`tasks.eval_per_domain` of them, in order). Here the
data is `units.jsonl` inside the package (200 conversions, each with its split). The check is
the shared `exact_answer` (the answer, stripped, must equal the task's; `partial` credits the
positions that agree), which returns the components `outcome` and `partial`. See
docs/domains.md.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources

from tempering.records import Budget, Task
from tempering.tasks import Domain
from tempering.tasks.answers import exact_answer

NAME = "example/units"
SPLITS = ("train", "heldout")


@cache
def load(split: str) -> tuple[Task, ...]:
    if split not in SPLITS:
        raise ValueError(f"{NAME}: no split {split!r} (known: {', '.join(SPLITS)})")
    rows = [json.loads(line) for line in resources.files(__package__).joinpath("units.jsonl").read_text().splitlines()]
    return tuple(Task(id="", domain=NAME, prompt=r["question"], answer=r["answer"], reference=r["answer"],
                      budget=Budget(max_tokens=8)) for r in rows if r["split"] == split)


DOMAIN = Domain(NAME, "convert a quantity between units (an example dataset domain)", exact_answer,
                load=lambda split: list(load(split)), alphabet="0123456789 abcdefghijklmnopqrstuvwxyz=")
