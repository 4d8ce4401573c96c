"""Code: write a Python program whose output is the digit sum of a number.

The completion is a program; the domain's verifier (`program_output`) runs it in the sandbox
and compares what it prints with the hidden answer. Any correct program counts, not only the reference. It
runs under the sandbox's configured limits (`[sandbox]` time_limit_s, memory_mb, ...): a
one-line program needs nothing else.
"""

from __future__ import annotations

import random

from tempering.records import Budget, ExecReason, Task, Trajectory
from tempering.verdict import InfrastructureError, Verdict, VerifierContext
from tempering.sandbox import ExecRequest
from tempering.tasks.answers import agreement, read_answer
from tempering.tasks.domain import Domain


def _make(rng: random.Random) -> Task:
    digits = [rng.randint(0, 9) for _ in range(rng.randint(3, 4))]
    number = "".join(map(str, digits))
    return Task(id="", domain="code", prompt=f"py digitsum {number}:",
                answer=str(sum(digits)), reference=f"print({'+'.join(number)})",
                budget=Budget(max_tokens=20))


def program_output(task: Task, sample: Trajectory, ctx: VerifierContext) -> Verdict:
    """Run the answer as a Python program in the sandbox; its stdout must equal the task's
    answer. `partial` is the positional agreement of the output with the answer, as for exact
    answers. An answer that cannot count (special tokens inside, cut off) is not run."""
    if ctx.sandbox is None:
        raise InfrastructureError("program_output needs a sandbox and none was given")
    answer = read_answer(sample, ctx)
    program = answer.text.strip()
    if not program:
        return Verdict({"outcome": 0.0, "partial": 0.0, "executes": 0.0}, "empty program")
    if answer.problem:
        return Verdict({"outcome": 0.0, "partial": 0.0, "executes": 0.0}, answer.problem)
    # Limits the task's budget leaves None, and the output cap, are the sandbox's ([sandbox]).
    result = ctx.sandbox.run(ExecRequest(
        command=("python3", "-I", "-S", "main.py"), files={"main.py": program.encode()},
        time_limit_s=task.budget.time_limit_s, memory_mb=task.budget.memory_mb,
        tag=ctx.tag))
    if result.reason == ExecReason.SANDBOX_ERROR:
        raise InfrastructureError(f"sandbox failed: {result.error}")
    if not result.ok:
        return Verdict({"outcome": 0.0, "partial": 0.0, "executes": 0.0}, f"program {result.reason.value}")
    if result.truncated:  # past the output cap: what is kept (head, cut mark, tail) is not its output
        return Verdict({"outcome": 0.0, "partial": 0.0, "executes": 0.0}, "program output_limit")
    output = result.stdout.strip()
    if output == task.answer:
        return Verdict({"outcome": 1.0, "partial": 1.0, "executes": 1.0}, "correct")
    return Verdict({"outcome": 0.0, "partial": agreement(output, task.answer), "executes": 1.0}, "wrong output")


DOMAIN = Domain("code", "a Python program printing the digit sum of a number", program_output, make=_make,
                alphabet="0123456789+:py digtsumrn()", sandbox=True, toolchain=False)
