"""Verifiers: pure checks of one completion against a task's hidden answer, by name.

A verifier returns a `Verdict` (named components in [0, 1] and a reason). A wrong or malformed
answer is a normal verdict with zero outcome; only a failure of the infrastructure (the sandbox
could not run the program) raises `InfrastructureError`, which the service turns into a failed
reward that is never trained on. Weighting the components is the service's job, not theirs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping

from tempering.records import ExecReason, Task
from tempering.sandbox import ExecRequest, Sandbox


class InfrastructureError(RuntimeError):
    """The check itself could not be carried out; says nothing about the completion."""


@dataclass(frozen=True)
class Verdict:
    components: Mapping[str, float]
    reason: str = ""


Verifier = Callable[[Task, str, "Sandbox | None"], Verdict]


def exact_answer(task: Task, completion: str, sandbox: Sandbox | None = None) -> Verdict:
    """The completion, stripped, must equal the answer; `partial` is the fraction of positions
    that agree, which gives small models a gradient toward the exact answer."""
    got, want = completion.strip(), task.answer
    if not got:
        return Verdict({"outcome": 0.0, "partial": 0.0}, "empty answer")
    if got == want:
        return Verdict({"outcome": 1.0, "partial": 1.0}, "correct")
    return Verdict({"outcome": 0.0, "partial": agreement(got, want)}, "wrong answer")


def agreement(got: str, want: str) -> float:
    """Fraction of positions where the two strings agree, over the longer length."""
    return sum(a == b for a, b in zip(got, want)) / max(len(got), len(want), 1)


def program_output(task: Task, completion: str, sandbox: Sandbox | None) -> Verdict:
    """Run the completion as a Python program in the sandbox; its stdout must equal the answer.
    `partial` is the positional agreement of the output with the answer, as for exact answers."""
    if sandbox is None:
        raise InfrastructureError("program_output needs a sandbox and none was given")
    program = completion.strip()
    if not program:
        return Verdict({"outcome": 0.0, "partial": 0.0, "executes": 0.0}, "empty program")
    result = sandbox.run(ExecRequest(
        command=("python3", "-I", "-S", "main.py"), files={"main.py": program.encode()},
        time_limit_s=task.budget.time_limit_s, memory_mb=task.budget.memory_mb, output_limit_bytes=4096))
    if result.reason == ExecReason.SANDBOX_ERROR:
        raise InfrastructureError(f"sandbox failed: {result.error}")
    if not result.ok:
        return Verdict({"outcome": 0.0, "partial": 0.0, "executes": 0.0}, f"program {result.reason.value}")
    output = result.stdout.strip()
    if output == task.answer:
        return Verdict({"outcome": 1.0, "partial": 1.0, "executes": 1.0}, "correct")
    return Verdict({"outcome": 0.0, "partial": agreement(output, task.answer), "executes": 1.0}, "wrong output")


VERIFIERS: dict[str, Verifier] = {"exact_answer": exact_answer, "program_output": program_output}
