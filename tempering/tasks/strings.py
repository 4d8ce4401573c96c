"""Strings: reverse a short lowercase word; checked exactly, with per-character partial credit."""

from __future__ import annotations

import random
import string

from tempering.records import Budget, Task
from tempering.tasks.registry import Domain

LETTERS = string.ascii_lowercase[:12]


def _make(rng: random.Random) -> Task:
    word = "".join(rng.choice(LETTERS) for _ in range(rng.randint(3, 5)))
    return Task(id="", domain="strings", prompt=f"rev {word}=", verifier="exact_answer", answer=word[::-1],
                reference=word[::-1], budget=Budget(max_tokens=8))


DOMAIN = Domain("strings", "reverse a word of 3-5 letters", LETTERS + "rev =", _make)
