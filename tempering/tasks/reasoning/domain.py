"""The `reasoning/<dataset>` domains: one generator domain per reasoning-gym dataset.

A task: `make(rng)` draws a seed and builds that entry (`entries.build`; entries that cannot be
checked are redrawn, `entries.undrawable`); the task carries it by reference (`ref` = dataset,
seed, config), its oracle answer as `answer`, the question plus the answer-format instruction as
`prompt` and as one user message (for chat templates), and the oracle in the answer format as
its SFT `reference`. Its token budget is 2,048 tokens of reasoning plus the answer's length in
characters (an upper bound on its tokens).

The answer format, for every dataset: the reply ends with the final answer between
`<answer>` and `</answer>` tags (reasoning-gym's own convention); the last such block counts.

The verifier: `read_answer` (the model must have ended its reply, no special token inside it),
the last answer block, then the dataset's scorer through our wrapper (`scoring.score`).
Components: `outcome` (the wrapped scorer's score in [0, 1]) and `format` (1 when the reply has
an answer block, even a wrong one; logged, not rewarded unless weighted). The five domains whose
scorers run sympy are `heavy`: the reward service runs their verifier in a process it kills at
`reward.timeout_s` (`catalog.HEAVY`); the others run in its threads, every scorer bounded by the
reply's length once our guards have run.
"""

from __future__ import annotations

import functools
import random

from tempering.records import Budget, Message, Task, Trajectory
from tempering.verdict import Verdict, VerifierContext
from tempering.tasks.answers import read_answer
from tempering.tasks.domain import Domain
from tempering.tasks.reasoning import entries, scoring
from tempering.tasks.reasoning.catalog import FIXED, HEAVY, domain_datasets

FAMILY = "reasoning"
OPEN, CLOSE = "<answer>", "</answer>"
INSTRUCTION = (f"Think the problem through, then end your reply with your final answer alone between {OPEN} and "
               f"{CLOSE} tags, written in the form the question asks for.")
REASONING_TOKENS = 2048  # the budget for thinking; the answer's own length comes on top


def answer_block(answer: str) -> str:
    return f"{OPEN}{answer}{CLOSE}"


def extract(reply: str) -> str | None:
    """The text of the reply's last complete answer block, or None when it has none."""
    end = reply.rfind(CLOSE)
    start = reply.rfind(OPEN, 0, end) if end >= 0 else -1
    return None if start < 0 else reply[start + len(OPEN): end]


def make(dataset: str, rng: random.Random) -> Task:
    for _ in range(100):
        seed = rng.randrange(2 ** 31)
        built = entries.build(dataset, seed)
        if not entries.undrawable(dataset, built):
            break
    else:
        raise RuntimeError(f"reasoning/{dataset}: 100 entries in a row could not be drawn "
                           f"({entries.undrawable(dataset, built)})")
    text = f"{built.entry['question'].rstrip()}\n\n{INSTRUCTION}"
    oracle = built.oracle.strip()
    return Task(id="", domain=f"{FAMILY}/{dataset}", prompt=text, answer=oracle, ref=entries.ref_text(dataset, seed),
                messages=(Message("user", text),), budget=Budget(max_tokens=REASONING_TOKENS + len(oracle)),
                reference=answer_block(oracle))


def verify(task: Task, sample: Trajectory, ctx: VerifierContext) -> Verdict:
    answer = read_answer(sample, ctx)
    if answer.problem:
        return Verdict({"outcome": 0.0, "format": 0.0}, answer.problem)
    return grade(task, answer.text)


def grade(task: Task, reply: str) -> Verdict:
    """The verdict on a reply's text (what `verify` does once the sample's answer is read)."""
    given = extract(reply)
    if given is None:
        return Verdict({"outcome": 0.0, "format": 0.0}, f"no {OPEN}...{CLOSE} block in the reply")
    dataset, seed, config = entries.parse_ref(task.ref)
    built = entries.resolve(dataset, seed, config, task.prompt, task.answer)
    scored = scoring.score(dataset, built, given)
    return Verdict({"outcome": scored.score, "format": 1.0}, scored.reason)


def _describe(dataset: str) -> str:
    how = "its scorer, with our fix" if dataset in FIXED else "its own scorer"
    return f"reasoning-gym's {dataset} generator, answers in {OPEN} tags checked by {how}"


DOMAINS = tuple(Domain(f"{FAMILY}/{d}", _describe(d), verify, make=functools.partial(make, d), heavy=d in HEAVY,
                       alphabet="") for d in domain_datasets())
