"""Code: write a Python program whose output is the digit sum of a number.

The completion is a program; the `program_output` verifier runs it in the sandbox and compares
what it prints with the hidden answer. Any correct program counts, not only the reference. It
runs under the sandbox's configured limits (`[sandbox]` time_limit_s, memory_mb, ...): a
one-line program needs nothing else.
"""

from __future__ import annotations

import random

from tempering.records import Budget, Task
from tempering.tasks.registry import Domain


def _make(rng: random.Random) -> Task:
    digits = [rng.randint(0, 9) for _ in range(rng.randint(3, 4))]
    number = "".join(map(str, digits))
    return Task(id="", domain="code", prompt=f"py digitsum {number}:", verifier="program_output",
                answer=str(sum(digits)), reference=f"print({'+'.join(number)})",
                budget=Budget(max_tokens=20))


DOMAIN = Domain("code", "a Python program printing the digit sum of a number", "0123456789+:py digtsumrn()", _make,
                sandbox=True)
