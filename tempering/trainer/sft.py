"""SFT warm-up: cross-entropy on tasks' reference completions before RL.

Each example is prompt + reference + eos with the loss on reference and eos only. Used to give
a from-scratch demo model a starting point; a real checkpoint usually skips it (`sft.steps = 0`).
"""

from __future__ import annotations

import random
from typing import Callable, Sequence

from tempering.errors import UserError
from tempering.agent.format import ToolFormat
from tempering.agent.tools import tool_schemas
from tempering.buffer import pack
from tempering.records import Batch, Task, Trajectory
from tempering.rollout.environment import Environments
from tempering.rollout.episode import Episode, replay
from tempering.rollout.group_key import GroupKey
from tempering.tokenizer import Tokenizer
from tempering.trainer.step import StepStats, Trainer


def sft_batch(tokenizer: Tokenizer, tasks: Sequence[Task], fmt: ToolFormat | None = None) -> Batch:
    """Each task's prompt + reference + eos, packed like RL samples (loss on reference and eos).
    The prompt ids are the rollout's (`encode_prompt`, BOS included where the tokenizer adds one).
    A task with tools has a reference per assistant turn: the episode is replayed as a rollout
    would play it (`fmt` renders the tool results, which carry no loss)."""
    rows = []
    for i, t in enumerate(tasks):
        if t.tools:
            turns = [fmt.in_format(turn, t) for turn in t.reference_turns] if fmt else list(t.reference_turns)
            sample = reference_episode(t, tokenizer, fmt, turns).trajectory(" ".join(turns))
        else:
            target = tokenizer.encode(t.reference or "") + [tokenizer.eos_id]
            sample = Trajectory(task_id=t.id, domain=t.domain, sample_index=0,
                                prompt_ids=tokenizer.encode_prompt(t.prompt, t.messages), token_ids=target,
                                logprobs=[0.0] * len(target), loss_mask=[1] * len(target),
                                versions=[-1] * len(target), text=t.reference or "", finish_reason="stop")
        rows.append((sample, 0.0, i))
    return pack(rows, tokenizer.pad_id)


def reference_episode(task: Task, tokenizer: Tokenizer, fmt: ToolFormat | None, turns: Sequence[str]) -> Episode:
    """`task`'s reference played as a rollout would play it: `turns` are its reference turns in
    the run's tool format (`ToolFormat.in_format`)."""
    if fmt is None:
        raise ValueError(f"task {task.id} has tools: its SFT example needs a tool format")
    hosts = Environments(None).open(task, 1, GroupKey("sft"))
    tools = tool_schemas(task) if tokenizer.chat_template else None
    episode = Episode(task, 0, tokenizer.encode_prompt(task.prompt, task.messages, tools), task.budget.max_tokens,
                      1 << 30, fmt.parse, fmt.renderer, hosts[0] if hosts else None)
    return replay(episode, turns, tokenizer)


def fitting(examples: Sequence[Task], tokenizer: Tokenizer, max_len: int) -> list[Task]:
    """The examples whose prompt and reference fit the model's context (positions past it are
    not trained: an example longer than the context would teach garbage)."""
    def length(t: Task) -> int:
        return len(tokenizer.encode_prompt(t.prompt, t.messages)) + sum(len(tokenizer.encode(x)) + 1
                                                                         for x in t.reference_turns)
    return [t for t in examples if length(t) <= max_len]


def sft_warmup(trainer: Trainer, tokenizer: Tokenizer, examples: Sequence[Task], steps: int, batch_size: int,
               seed: int, on_step: Callable[[int, StepStats], None] | None = None,
               stop: Callable[[], bool] = lambda: False, fmt: ToolFormat | None = None) -> int:
    """`steps` SFT steps, or fewer once `stop()` is true. -> the steps taken"""
    if not examples:
        raise UserError("sft.steps > 0 but the task mix has no reference completions to learn from")
    rng, examples = random.Random(seed), list(examples)
    for step in range(steps):
        if stop():
            return step
        stats = trainer.sft_step(sft_batch(tokenizer, rng.sample(examples, min(batch_size, len(examples))), fmt))
        if on_step is not None:
            on_step(step, stats)
    return steps
