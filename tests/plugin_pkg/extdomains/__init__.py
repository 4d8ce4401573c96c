"""A domain package outside Tempering, found through its entry point (tempering.domains)."""

import random

from tempering.records import Budget, Task
from tempering.tasks import Domain
from tempering.tasks.answers import exact_answer


def _make(rng: random.Random) -> Task:
    word = "".join(rng.choice("abcd") for _ in range(3))
    return Task(id="", domain="ext/echo", prompt=f"echo {word}=", answer=word, reference=word,
                budget=Budget(max_tokens=6))


def _broken(rng: random.Random) -> Task:
    """Its reference is wrong: `tempering tasks check` must name it."""
    return Task(id="", domain="ext/broken", prompt="echo ab=", answer="ab", reference="ba", budget=Budget(max_tokens=6))


DOMAINS = [Domain("ext/echo", "repeat a word (a plugin's domain)", exact_answer, make=_make, alphabet="abcdecho ="),
           Domain("ext/broken", "a domain whose oracle is wrong", exact_answer, make=_broken, alphabet="abcdecho =")]
