"""The typed records that cross component boundaries.

Plain dataclasses, no behaviour beyond small derived properties and validation of invariants.
Tensors appear only in `Batch`, the trainer's input; everything upstream is Python lists so it
pickles cheaply between processes and serialises to JSON for the lineage store.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Mapping

import torch


@dataclass(frozen=True)
class Message:
    role: str  # "system" | "user" | "assistant" | "tool"
    content: str


@dataclass(frozen=True)
class Budget:
    """Per-task limits: how long the model may talk and what one sandbox execution may use."""

    max_turns: int = 1
    max_tokens: int = 64
    time_limit_s: float = 5.0
    memory_mb: int = 256


@dataclass(frozen=True)
class Task:
    """One checkable problem. `answer` is what the verifier checks against (hidden from the
    model); `reference` is a known-good completion used for SFT warm-up, when one exists."""

    id: str
    domain: str
    prompt: str
    verifier: str
    answer: str
    messages: tuple[Message, ...] = ()
    tools: tuple[str, ...] = ()
    priority: float = 1.0
    budget: Budget = field(default_factory=Budget)
    reference: str | None = None
    metadata: Mapping[str, str] = field(default_factory=dict)


class ExecReason(str, enum.Enum):
    OK = "ok"
    NONZERO_EXIT = "nonzero_exit"
    TIMEOUT = "timeout"
    OOM = "oom"
    OUTPUT_LIMIT = "output_limit"
    KILLED = "killed"
    SANDBOX_ERROR = "sandbox_error"


@dataclass(frozen=True)
class ExecResult:
    """What one sandbox execution did. `reason` says why it ended; infrastructure failures are
    `sandbox_error` so the reward service never mistakes them for the model's fault."""

    reason: ExecReason
    exit_code: int | None
    stdout: str = ""
    stderr: str = ""
    truncated: bool = False
    wall_s: float = 0.0
    cpu_s: float = 0.0
    peak_memory_mb: float = 0.0
    start: str = "cold"  # "cold" | "warm"
    files: Mapping[str, bytes] = field(default_factory=dict)
    error: str = ""  # sandbox_error detail

    @property
    def ok(self) -> bool:
        return self.reason == ExecReason.OK


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: str
    result: ExecResult | None = None


@dataclass(frozen=True)
class Turn:
    """One segment of a trajectory's completion: `[start, end)` indexes into its token arrays."""

    role: str  # "model" | "tool"
    start: int
    end: int
    tool_call: ToolCall | None = None


@dataclass
class Trajectory:
    """One sample: the prompt and everything after it, token by token.

    Completion arrays are aligned: model tokens have loss_mask 1, their sampling logprob and the
    policy version that produced them; tool-output tokens have loss_mask 0, logprob 0, version -1.
    """

    task_id: str
    domain: str
    sample_index: int
    prompt_ids: list[int]
    token_ids: list[int]
    logprobs: list[float]
    loss_mask: list[int]
    versions: list[int]
    text: str
    finish_reason: str  # "stop" | "length" | "abort"
    turns: list[Turn] = field(default_factory=list)
    created_at: float = 0.0

    def __post_init__(self) -> None:
        n = len(self.token_ids)
        assert len(self.logprobs) == n and len(self.loss_mask) == n and len(self.versions) == n, (
            "trajectory arrays must be aligned"
        )

    @property
    def oldest_version(self) -> int:
        model_versions = [v for v, m in zip(self.versions, self.loss_mask) if m]
        return min(model_versions) if model_versions else -1

    @property
    def num_model_tokens(self) -> int:
        return sum(self.loss_mask)


@dataclass(frozen=True)
class Reward:
    """Named components, their weights, and the weighted total.

    `failed` marks an infrastructure failure (verifier crash or timeout, sandbox error): such a
    sample is never trained on. A wrong or malformed answer is not a failure: it scores zero with
    `reason` saying why.
    """

    components: Mapping[str, float]
    weights: Mapping[str, float]
    total: float
    failed: bool = False
    reason: str = ""

    @property
    def outcome(self) -> float:
        return self.components.get("outcome", 0.0)


@dataclass
class Group:
    """The n samples of one task, with their rewards and (once computed) advantages."""

    task: Task
    trajectories: list[Trajectory]
    rewards: list[Reward]
    advantages: list[float] = field(default_factory=list)

    @property
    def oldest_version(self) -> int:
        return min(t.oldest_version for t in self.trajectories)


@dataclass
class Batch:
    """Packed, right-padded sequences ready for one trainer step.

    Shapes: [N, T] for every tensor; `advantages` is per token (the sequence advantage broadcast
    over its completion tokens) so token-level and sequence-level losses read the same record.
    `prompt_lens` and `seq_lens` count real tokens per row.
    """

    input_ids: torch.Tensor  # [N, T] long
    loss_mask: torch.Tensor  # [N, T] float, 1 on model-generated target positions
    old_logprobs: torch.Tensor  # [N, T] float, behaviour policy logprob of each target token
    advantages: torch.Tensor  # [N, T] float
    versions: torch.Tensor  # [N, T] long, -1 where not a model token
    seq_lens: torch.Tensor  # [N] long
    group_ids: torch.Tensor  # [N] long, which group each row came from

    @property
    def num_tokens(self) -> int:
        return int(self.loss_mask.sum().item())
