"""The registry of domains by name."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable

from tempering.errors import UserError
from tempering.records import Task


@dataclass(frozen=True)
class Domain:
    """A family of tasks. `make(rng)` returns a fresh task (its id is assigned by the pool);
    `alphabet` lists every character prompts, answers and references use, so a character
    tokenizer built from the mix can spell them all. `sandbox` says whether its verifier runs
    code: a run starts the sandbox only when some domain of its mix needs it."""

    name: str
    description: str
    alphabet: str
    make: Callable[[random.Random], Task]
    sandbox: bool = False


def _load() -> dict[str, Domain]:
    from tempering.tasks import arithmetic, code, files, sorting, strings
    from tempering.tasks.terminal import domain as terminal

    found = [arithmetic.DOMAIN, code.DOMAIN, files.DOMAIN, sorting.DOMAIN, strings.DOMAIN, terminal.DOMAIN]
    return {d.name: d for d in found}


DOMAINS: dict[str, Domain] = _load()


def get_domain(name: str) -> Domain:
    if name not in DOMAINS:
        raise UserError(f"unknown task domain {name!r} (known: {', '.join(sorted(DOMAINS))})")
    return DOMAINS[name]
