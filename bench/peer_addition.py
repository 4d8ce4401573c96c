"""The TRL peer's task, rebuilt, as a Tempering domain (a `tasks.plugins` module): 2-digit addition.

`07+45=` -> `052`: both operands zero-padded to two digits, the sum to three, so every prompt
is 6 characters and every answer 3 digits plus the end-of-sequence token (the peer samples at
most 4 new tokens). Reward, as the peer computes it: 0.5 x exact + 0.5 x the fraction of the
three answer digits right in place. The verifier gives the two components, `outcome` (exact:
the model ended its answer and it is the sum) and `partial` (digits in place over three, also
for an answer the model did not end); the run weighs them with
`--reward.weights='{outcome = 0.5, partial = 0.5}'`.

A dataset domain, so that its held-out split is exactly a given list of 500 problems: by default
the 10,000 pairs (a, b) in 0..99 are shuffled with a fixed seed of ours and the first 500 are
held out (this is not TRL's own draw, which we do not have); with `PEER_ADDITION_HELDOUT` naming
a file (one `a+b` per line, e.g. the peer's own 500), those are held out. The held-out problems
are the evaluation set (`tasks.eval_per_domain = 500`), the other 9,500 the training split,
drawn without replacement epoch after epoch (a generator domain's held-out set is drawn by hash
and seed instead, and could not be made to equal a given list).

Import it by name (`--tasks.plugins='["peer_addition"]'`) with this folder on the import path:
`bench/learning.py` runs from here, and the rollout worker, spawned, inherits `sys.path`; from
the command line, `PYTHONPATH=bench .venv/bin/tempering train ...`.
"""

from __future__ import annotations

import os
import random
import re
from functools import lru_cache

from tempering.records import Budget, Task
from tempering.verdict import Verdict
from tempering.tasks.answers import read_answer
from tempering.tasks.domain import Domain

NAME = "peer_addition"
HELDOUT = 500
HELDOUT_ENV = "PEER_ADDITION_HELDOUT"  # a file of the held-out problems; the spawned worker inherits it
SEED = 20261201  # the held-out draw
ALPHABET = "0123456789+="


def problem(a: int, b: int) -> tuple[str, str]:
    """(prompt, answer): `07+45=`, `052`."""
    return f"{a:02d}+{b:02d}=", f"{a + b:03d}"


@lru_cache(maxsize=1)
def pairs() -> tuple[tuple[int, int], ...]:
    """All 10,000 operand pairs, the HELDOUT held-out ones first: the file's, in its order, or
    the fixed shuffle's first."""
    out = [(a, b) for a in range(100) for b in range(100)]
    random.Random(SEED).shuffle(out)
    path = os.environ.get(HELDOUT_ENV)
    if not path:
        return tuple(out)
    held = read_heldout(path)
    return (*held, *(p for p in out if p not in set(held)))


def read_heldout(path: str) -> tuple[tuple[int, int], ...]:
    """HELDOUT distinct problems `a+b` (0 <= a, b <= 99), one per line; ValueError naming the
    file and line otherwise."""
    held: list[tuple[int, int]] = []
    for i, line in enumerate(open(path, encoding="utf-8").read().splitlines(), 1):
        if line.strip():
            m = re.fullmatch(r"\s*(\d{1,2})\s*\+\s*(\d{1,2})\s*=?\s*", line)
            if not m:
                raise ValueError(f"{HELDOUT_ENV}={path}:{i}: expected a problem like 7+45, got {line!r}")
            held.append((int(m.group(1)), int(m.group(2))))
    if len(held) != HELDOUT or len(set(held)) != HELDOUT:
        raise ValueError(f"{HELDOUT_ENV}={path}: expected {HELDOUT} distinct problems, got {len(held)} "
                         f"({len(set(held))} distinct)")
    return tuple(held)


def heldout_pairs() -> tuple[tuple[int, int], ...]:
    return pairs()[:HELDOUT]


def train_pairs() -> tuple[tuple[int, int], ...]:
    return pairs()[HELDOUT:]


def _task(a: int, b: int) -> Task:
    prompt, answer = problem(a, b)
    return Task(id="", domain=NAME, prompt=prompt, answer=answer, reference=answer, budget=Budget(max_tokens=4))


@lru_cache(maxsize=2)
def _load(split: str) -> tuple[Task, ...]:
    if split == "heldout":
        return tuple(_task(a, b) for a, b in heldout_pairs())
    if split == "train":
        return tuple(_task(a, b) for a, b in train_pairs())
    raise ValueError(f"{NAME}: no split {split!r}")


def digits_in_place(got: str, want: str) -> float:
    """Fraction of the answer's digits that the sample has at the same position."""
    return sum(a == b for a, b in zip(got, want)) / len(want)


def verify(task: Task, sample, ctx) -> Verdict:
    answer = read_answer(sample, ctx)
    got = answer.text.strip()
    partial = digits_in_place(got, task.answer)
    if answer.problem:
        return Verdict({"outcome": 0.0, "partial": partial}, answer.problem)
    if got == task.answer:
        return Verdict({"outcome": 1.0, "partial": 1.0}, "correct")
    return Verdict({"outcome": 0.0, "partial": partial}, "wrong answer")


DOMAIN = Domain(NAME, "2-digit addition, zero-padded (the TRL peer's task): 07+45= -> 052", verify,
                load=lambda split: list(_load(split)), alphabet=ALPHABET)
DOMAINS = [DOMAIN]
