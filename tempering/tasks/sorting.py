"""Sorting: put the digits of a number in ascending order; exact, with per-position credit.

An algorithmic task (comparison, not memorised facts), so held-out numbers test the procedure.
"""

from __future__ import annotations

import random

from tempering.records import Budget, Task
from tempering.tasks.answers import exact_answer
from tempering.tasks.domain import Domain


def _make(rng: random.Random) -> Task:
    digits = "".join(str(rng.randint(0, 9)) for _ in range(rng.randint(4, 5)))
    answer = "".join(sorted(digits))
    return Task(id="", domain="sorting", prompt=f"sort {digits}=", answer=answer,
                reference=answer, budget=Budget(max_tokens=8))


DOMAIN = Domain("sorting", "sort the digits of a 4-5 digit number", exact_answer, make=_make,
                alphabet="0123456789sort =")
