"""An example generator domain, `example/countdown`: reach a target number from given numbers.

`3 8 2 -> 22` asks for an expression that uses each of the numbers exactly once, with `+`, `-`
and `*` (and parentheses), and equals the target: `3*8-2`. A generator makes a fresh task from a
seeded `random.Random` (`make(rng)`), so the pool never runs out and the held-out tasks are
drawn apart by hash. The verifier reads the answer with `read_answer` (which refuses an answer
the model did not end, or one with a special token inside), parses it safely (no `eval`), and
returns named reward components: `outcome` (1 for a right expression), `partial` (how close a
well-formed expression's value came) and `format` (the answer was a well-formed expression over
the given numbers). Which of them count, and how much, is the run's `reward.weights`. This file
is the worked example of docs/domains.md.
"""

from __future__ import annotations

import ast
import random
from collections import Counter

from tempering.records import Budget, Task, Trajectory
from tempering.verdict import Verdict, VerifierContext
from tempering.tasks import Domain
from tempering.tasks.answers import read_answer

NAME = "example/countdown"
OPS = "+-*"


def make(rng: random.Random) -> Task:
    """Three numbers 1-9 and a target some expression over all of them reaches."""
    numbers = [rng.randint(1, 9) for _ in range(3)]
    a, b, c = numbers
    op1, op2 = rng.choice(OPS), rng.choice(OPS)
    expression = f"{a}{op1}{b}{op2}{c}"
    target = _value(ast.parse(expression, mode="eval").body)
    prompt = f"{a} {b} {c} -> {target}="
    # `answer` is what a check may compare with; `reference` a known-good completion (SFT warm-up,
    # and the oracle `tempering tasks check` plays). The budget caps the answer's tokens.
    return Task(id="", domain=NAME, prompt=prompt, answer=str(target), reference=expression,
                budget=Budget(max_tokens=12))


def verify(task: Task, sample: Trajectory, ctx: VerifierContext) -> Verdict:
    """(task, sample, ctx) -> Verdict: the signature every verifier has."""
    answer = read_answer(sample, ctx)
    numbers = [int(x) for x in task.prompt.split("->")[0].split()]
    target = int(task.answer)
    if answer.problem:  # not ended (cut off by the budget), or a special token inside
        return Verdict({"outcome": 0.0, "partial": 0.0, "format": 0.0}, answer.problem)
    try:
        tree = ast.parse(answer.text.strip(), mode="eval").body
        used, value = _leaves(tree), _value(tree)
    except (SyntaxError, ValueError) as e:
        return Verdict({"outcome": 0.0, "partial": 0.0, "format": 0.0}, f"not an expression: {e}")
    if Counter(used) != Counter(numbers):
        return Verdict({"outcome": 0.0, "partial": 0.0, "format": 0.0},
                       f"uses {sorted(used)}, not each of {sorted(numbers)} once")
    closeness = max(0.0, 1.0 - abs(value - target) / max(abs(target), 1))
    if value == target:
        return Verdict({"outcome": 1.0, "partial": 1.0, "format": 1.0}, "correct")
    return Verdict({"outcome": 0.0, "partial": closeness, "format": 1.0}, f"{value}, not {target}")


def _leaves(node: ast.expr) -> list[int]:
    if isinstance(node, ast.BinOp):
        return _leaves(node.left) + _leaves(node.right)
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return [node.value]
    raise ValueError(f"{ast.dump(node)[:40]} is not allowed")


def _value(node: ast.expr) -> int:
    """The expression's value: integers, + - * only (parsed, never eval'd)."""
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in (ast.Add, ast.Sub, ast.Mult):
        left, right = _value(node.left), _value(node.right)
        return {ast.Add: left + right, ast.Sub: left - right, ast.Mult: left * right}[type(node.op)]
    raise ValueError(f"{ast.dump(node)[:40]} is not allowed")


# `alphabet` matters only to the demo's character tokenizer (a model built from scratch): the
# characters the domain's text uses. A real model's tokenizer needs none.
DOMAIN = Domain(NAME, "reach a target from three numbers with + - * (an example generator domain)", verify,
                make=make, alphabet="0123456789+-*() >=")
