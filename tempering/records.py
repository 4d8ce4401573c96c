"""The typed records that cross component boundaries.

Plain dataclasses, no behaviour beyond small derived properties and validation of invariants.
Tensors appear only in `Batch`, the trainer's input; everything upstream is Python lists so it
pickles cheaply between processes and is written as it is to the lineage store.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Mapping

import torch

from tempering.jsonvalue import JSON
from tempering.sandbox_paths import WORKSPACE


@dataclass(frozen=True)
class Message:
    """One message of a conversation. An assistant message may carry the tool calls it made
    (`tool_calls`, with their ids); a tool message names the call it answers (`tool_call_id`).
    Chat templates render both (`Tokenizer.render_chat`)."""

    role: str  # "system" | "user" | "assistant" | "tool"
    content: str
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str = ""


@dataclass(frozen=True)
class Budget:
    """Per-task limits. An episode ends when it has used `max_turns` model turns or
    `max_tokens` model tokens (over all its turns), or after `wall_s` seconds; each sandbox
    command gets `time_limit_s` and `memory_mb`, and all of them together `cpu_s` CPU seconds.
    `time_limit_s` / `memory_mb` None: the sandbox's configured default (`[sandbox]` keys of
    the same names); a task that needs other limits sets them."""

    max_turns: int = 1
    max_tokens: int = 64
    time_limit_s: float | None = None
    memory_mb: int | None = None
    wall_s: float = 300.0
    cpu_s: float = 60.0


@dataclass(frozen=True)
class Environment:
    """Where a task's episode acts: a workspace, given by reference. `files` holds small
    inline files (workdir-relative name -> text); `folder` a Harbor-format task folder whose
    environment is interpreted at set-up. The workspace appears at `workdir` in the sandbox."""

    workdir: str = WORKSPACE
    files: tuple[tuple[str, str], ...] = ()
    folder: str = ""


@dataclass(frozen=True)
class Task:
    """One checkable problem of a domain (which owns its check). `answer` is a short answer the
    check compares with (hidden from the model; "" when the check needs none); `ref` is how the
    domain rebuilds the task's larger data (a seed, a path: a document, a target mesh), never
    the data itself; `reference` is a known-good completion used for SFT warm-up, when one
    exists: the text of each assistant turn when the task is an episode of several. `tools` are
    the tools its episodes may call, `environment` the workspace they act on."""

    id: str
    domain: str
    prompt: str
    answer: str = ""
    ref: str = ""
    messages: tuple[Message, ...] = ()
    tools: tuple[str, ...] = ()
    environment: Environment | None = None
    budget: Budget = field(default_factory=Budget)
    reference: str | tuple[str, ...] | None = None

    @property
    def reference_turns(self) -> tuple[str, ...]:
        return (self.reference,) if isinstance(self.reference, str) else tuple(self.reference or ())


class ExecReason(str, enum.Enum):
    OK = "ok"
    NONZERO_EXIT = "nonzero_exit"
    TIMEOUT = "timeout"
    OOM = "oom"
    OUTPUT_LIMIT = "output_limit"
    KILLED = "killed"
    SANDBOX_ERROR = "sandbox_error"
    BUDGET = "budget"  # refused without running: the sandbox session's budget is spent


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
    error: str = ""  # sandbox_error detail; for a session, also why its workspace was not kept
    archives: Mapping[str, bytes] = field(default_factory=dict)  # collected mounts: path -> tar archive
    lingering: int = 0  # processes the command left running (a service it started), killed when it ended

    @property
    def ok(self) -> bool:
        return self.reason == ExecReason.OK


@dataclass(frozen=True)
class ToolCall:
    """A tool call parsed from a model turn. `error` says why it was not carried out (malformed,
    unknown tool, bad arguments, budget spent): the model reads that as the observation. `result`
    is the sandbox execution when the tool ran a command."""

    name: str
    arguments: Mapping[str, JSON]  # as the model wrote them (a JSON object, or the compact format's strings)
    output: str = ""  # what the tool returned to the model (before rendering)
    error: str = ""
    # what kind of error, for the metrics: "malformed", "unknown_tool", "bad_arguments" (the
    # model's call could not be made) or "tool" (the tool could not do it: no such file, ...)
    error_kind: str = ""
    result: ExecResult | None = None
    id: str = ""  # the call's id where a client names it (served function calling); "" in rollouts

    @property
    def failed(self) -> bool:
        """The call could not be made or carried out, or its command had to be stopped (a
        deadline, memory, the output cap). A command that exits non-zero (a failing test run)
        is a call that worked."""
        return bool(self.error) or (self.result is not None and self.result.reason not in (
            ExecReason.OK, ExecReason.NONZERO_EXIT))


@dataclass(frozen=True)
class Turn:
    """One segment of a trajectory's completion: `[start, end)` indexes into its token arrays.
    An assistant turn may make tool calls; the tool turn after it holds their results."""

    role: str  # "assistant" | "tool"
    start: int
    end: int
    tool_calls: tuple[ToolCall, ...] = ()


@dataclass
class Trajectory:
    """One sample: the prompt and everything after it, token by token.

    Completion arrays are aligned: model tokens have loss_mask 1, their sampling logprob and the
    policy version that produced them; tool-output tokens have loss_mask 0, logprob 0, version -1.
    `turns` segments the completion when the episode had more than one turn (empty otherwise).
    `finish_reason`: "stop" (the model ended), "length" (its token budget), "abort", and for
    episodes "max_turns", "context" (the next turn would not fit the context), "timeout"
    (its wall-clock budget).
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
    finish_reason: str
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

    @property
    def tool_calls(self) -> list[ToolCall]:
        return [c for t in self.turns for c in t.tool_calls]

    @property
    def answer_ids(self) -> list[int]:
        """The ids of the last assistant turn (the whole completion for a single turn)."""
        last = next((t for t in reversed(self.turns) if t.role == "assistant"), None)
        return self.token_ids if last is None else self.token_ids[last.start: last.end]


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

    Shapes: [N, T] unless noted; `advantages` is per token (the sequence advantage broadcast
    over its completion tokens) so token-level and sequence-level losses read the same record;
    they are 0 when the trainer computes its own (GAE, from `rewards` and its value model).
    `seq_lens` counts real tokens per row. `version` is the trainer's policy version the batch
    was made for (-1: none, as in SFT); tokens whose `versions` equal it are on-policy.
    """

    input_ids: torch.Tensor  # [N, T] long
    loss_mask: torch.Tensor  # [N, T] float, 1 on model-generated target positions
    old_logprobs: torch.Tensor  # [N, T] float, behaviour policy logprob of each target token
    advantages: torch.Tensor  # [N, T] float
    versions: torch.Tensor  # [N, T] long, -1 where not a model token
    seq_lens: torch.Tensor  # [N] long
    group_ids: torch.Tensor  # [N] long, which group each row came from
    rewards: torch.Tensor  # [N] float, each sample's reward after shaping (what advantages came from)
    version: int = -1
    prompt_lens: torch.Tensor | None = None  # [N] long, prompt tokens of each row (None: unknown)

    @property
    def num_tokens(self) -> int:
        return int(self.loss_mask.sum().item())
