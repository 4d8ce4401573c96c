"""What a verifier works with and returns: `VerifierContext` in, `Verdict` out.

A verifier (each domain owns its own: `tempering.tasks`) receives the task, the sample itself (a
`Trajectory`: token ids, finish reason, decoded text) and this context, and returns a `Verdict`:
named components in [0, 1] and a reason. A wrong or malformed answer is a normal verdict with
zero outcome; only a failure of the infrastructure (the sandbox could not run the program)
raises `InfrastructureError`, which the reward service turns into a failed reward that is never
trained on. Weighting the components is the service's job, not the verifier's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

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
    workspace: Any = None  # the episode's final workspace, or its domain's host state (a scene)
    tag: ExecTag = field(default_factory=ExecTag)  # carried by the sandbox executions of the check


Verifier = Callable[[Task, Trajectory, VerifierContext], Verdict]
