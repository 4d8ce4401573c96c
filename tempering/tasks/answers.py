"""A sample's answer, as several domains' verifiers read it: the answer as the model gave it, and
the check against an exact answer (with positional partial credit).

`read_answer` looks at the sample itself, not only its decoded text: decoding skips special
tokens, so `0 5 2 <pad>` reads as `052`, and only the ids show that the model never gave that
answer. `exact_answer` is a verifier as it stands (the demo's domains use it directly).
"""

from __future__ import annotations

from dataclasses import dataclass

from tempering.records import Task, Trajectory
from tempering.verdict import Verdict, VerifierContext


@dataclass(frozen=True)
class Answer:
    """A sample's answer as a verifier must read it: `text` spells out any special token the
    model sampled inside it; `problem` says why it cannot count as given ("" when it can)."""

    text: str
    problem: str


def read_answer(sample: Trajectory, ctx: VerifierContext) -> Answer:
    """The last assistant turn up to its stop token. It counts only if the model ended it
    (finish reason "stop", not cut off by a budget) and sampled no special token inside it."""
    ids, special = list(sample.answer_ids), ctx.tokenizer.special_ids
    if sample.finish_reason == "stop" and ids and ids[-1] in special:
        ids.pop()  # the eos (or stop token id) that ended it
    inside = [t for t in ids if t in special]
    if inside:
        return Answer(ctx.tokenizer.decode(ids, skip_special_tokens=False),
                      f"special token {ctx.tokenizer.token(inside[0])!r} inside the answer")
    if sample.finish_reason != "stop":
        return Answer(ctx.tokenizer.decode(ids), f"the answer did not end (finish reason {sample.finish_reason!r})")
    return Answer(ctx.tokenizer.decode(ids), "")


def exact_answer(task: Task, sample: Trajectory, ctx: VerifierContext) -> Verdict:
    """The answer, stripped, must equal the task's; `partial` is the fraction of positions that
    agree, which gives small models a gradient toward the exact answer."""
    answer = read_answer(sample, ctx)
    got, want = answer.text.strip(), task.answer
    if not got:
        return Verdict({"outcome": 0.0, "partial": 0.0}, "empty answer")
    partial = agreement(got, want)
    if answer.problem:
        return Verdict({"outcome": 0.0, "partial": partial}, answer.problem)
    if got == want:
        return Verdict({"outcome": 1.0, "partial": 1.0}, "correct")
    return Verdict({"outcome": 0.0, "partial": partial}, "wrong answer")


def agreement(got: str, want: str) -> float:
    """Fraction of positions where the two strings agree, over the longer length."""
    return sum(a == b for a, b in zip(got, want)) / max(len(got), len(want), 1)
