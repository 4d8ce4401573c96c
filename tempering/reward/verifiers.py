"""Verifiers: pure checks of one sample against a task's hidden answer, by name.

A verifier receives the sample itself (a `Trajectory`: token ids, finish reason, decoded text),
not only its text: decoding skips special tokens, so `0 5 2 <pad>` reads as `052`, and only the
ids show that the model never gave that answer. It returns a `Verdict` (named components in
[0, 1] and a reason). A wrong or malformed answer is a normal verdict with zero outcome; only a
failure of the infrastructure (the sandbox could not run the program) raises
`InfrastructureError`, which the service turns into a failed reward that is never trained on.
Weighting the components is the service's job, not theirs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from tempering.records import ExecReason, Task, Trajectory
from tempering.sandbox import ExecRequest, Sandbox
from tempering.sandbox.request import ExecTag
from tempering.tokenizer import Tokenizer


class InfrastructureError(RuntimeError):
    """The check itself could not be carried out; says nothing about the completion."""


@dataclass(frozen=True)
class Verdict:
    components: Mapping[str, float]
    reason: str = ""


@dataclass(frozen=True)
class VerifierContext:
    """What a verifier may use besides the task and the sample: the tokenizer that produced the
    sample's ids, the sandbox for running code (None when the task mix needs none), the final
    workspace of the sample's episode (None for tasks without one), and the sample's tag."""

    tokenizer: Tokenizer
    sandbox: Sandbox | None = None
    workspace: Any = None
    tag: ExecTag = field(default_factory=ExecTag)  # carried by the sandbox executions of the check


Verifier = Callable[[Task, Trajectory, VerifierContext], Verdict]


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
    output = result.stdout.strip()
    if output == task.answer:
        return Verdict({"outcome": 1.0, "partial": 1.0, "executes": 1.0}, "correct")
    return Verdict({"outcome": 0.0, "partial": agreement(output, task.answer), "executes": 1.0}, "wrong output")


def harbor_tests(task: Task, sample: Trajectory, ctx: VerifierContext) -> Verdict:
    """A Harbor-format task: its hidden tests run on the episode's final workspace in a fresh
    sandbox (`tasks.harbor.verify`); the reward is what they write. `outcome` is that reward."""
    from tempering.tasks.harbor import verify_folder  # the Harbor package loads only for its tasks

    if ctx.sandbox is None or ctx.workspace is None or task.environment is None:
        raise InfrastructureError("harbor_tests needs the sandbox and the episode's final workspace")
    verdict = verify_folder(task.environment.folder, ctx.sandbox, ctx.workspace, ctx.tag)
    if verdict.failed:
        raise InfrastructureError(f"verification failed: {verdict.reason}")
    return Verdict({"outcome": verdict.reward}, verdict.reason)


VERIFIERS: dict[str, Verifier] = {"exact_answer": exact_answer, "program_output": program_output,
                                  "harbor_tests": harbor_tests}
