"""What a check works with and returns: `VerifierContext` in, `Verdict` out; `JudgeItem`, what
graders see of a sample. A leaf shared by the domains (`tempering.tasks`) and the reward service,
so that neither imports the other for these types.

A verifier (each domain owns its own: `tempering.tasks`) receives the task, the sample itself (a
`Trajectory`: token ids, finish reason, decoded text) and this context, and returns a `Verdict`:
named components in [0, 1] and a reason. A wrong or malformed answer is a normal verdict with
zero outcome; only a failure of the infrastructure (the sandbox could not run the program)
raises `InfrastructureError`, which the reward service turns into a failed reward that is never
trained on. Weighting the components is the service's job, not the verifier's. Rubrics and the
judges that read a `JudgeItem` are `tempering.reward`'s.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping

from tempering.records import Task, Trajectory
from tempering.sandbox import Sandbox
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
    workspace: object = None  # the episode's final state (ToolHost.final_state): a workspace, or its domain's host
    tag: ExecTag = field(default_factory=ExecTag)  # carried by the sandbox executions of the check


Verifier = Callable[[Task, Trajectory, VerifierContext], Verdict]


@dataclass(frozen=True)
class JudgeItem:
    """One thing to grade: the task as the model saw it, the sample's final answer and/or the
    transcript of its episode (turns and tool calls: for process rubrics), and optionally a
    reference answer."""

    prompt: str
    answer: str = ""
    reference: str | None = None
    transcript: str = ""


def task_text(task: Task) -> str:
    """The task as the model saw it (its messages when it has no plain prompt)."""
    return task.prompt or "\n\n".join(f"{m.role}: {m.content}" for m in task.messages)


def outcome_item(task: Task, sample: Trajectory, tokenizer: Tokenizer, reference: str | None = None) -> JudgeItem:
    """The sample's final answer (its last assistant turn) for an outcome rubric; the reference
    is the task's `answer` unless given."""
    answer = tokenizer.decode(sample.answer_ids) if sample.turns else sample.text
    return JudgeItem(task_text(task), answer, reference if reference is not None else (task.answer or None))
