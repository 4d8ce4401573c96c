"""Arithmetic: add or subtract two numbers below 100; the answer is an exact integer.

Prompts are bare expressions (`37+48=`) so a tiny character model can learn them from scratch;
the answer is checked by the `exact_answer` verifier, with partial credit for correct digits.
Three difficulty levels: single-digit sums, two-digit sums, and two-digit sums and differences
(the top level, the one evaluated and drawn without a curriculum).
"""

from __future__ import annotations

import random

from tempering.records import Budget, Task
from tempering.tasks.answers import exact_answer
from tempering.tasks.domain import Domain


def _make(rng: random.Random, level: int) -> Task:
    top = 9 if level == 0 else 99
    a, b = rng.randint(0, top), rng.randint(0, top)
    if level < 2 or rng.random() < 0.5:
        prompt, answer = f"{a}+{b}=", str(a + b)
    else:
        a, b = max(a, b), min(a, b)
        prompt, answer = f"{a}-{b}=", str(a - b)
    return Task(id="", domain="arithmetic", prompt=prompt, answer=answer,
                reference=answer, budget=Budget(max_tokens=8))


DOMAIN = Domain("arithmetic", "add or subtract two numbers below 100", exact_answer, make=_make,
                alphabet="0123456789+-=", levels=3)
