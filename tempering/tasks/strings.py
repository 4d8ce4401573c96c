"""Strings: reverse a three-letter word over the letters a-h; exact, with per-letter partial credit."""

from __future__ import annotations

import random
import string

from tempering.records import Budget, Task
from tempering.tasks.answers import exact_answer
from tempering.tasks.domain import Domain

LETTERS = string.ascii_lowercase[:8]


def _make(rng: random.Random) -> Task:
    word = "".join(rng.choice(LETTERS) for _ in range(3))
    return Task(id="", domain="strings", prompt=f"rev {word}=", answer=word[::-1],
                reference=word[::-1], budget=Budget(max_tokens=8))


DOMAIN = Domain("strings", "reverse a three-letter word", exact_answer, make=_make, alphabet=LETTERS + "rev =")
