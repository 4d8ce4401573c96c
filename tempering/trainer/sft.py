"""SFT warm-up: cross-entropy on tasks' reference completions before RL.

Each example is prompt + reference + eos with the loss on reference and eos only. Used to give
a from-scratch demo model a starting point; a real checkpoint usually skips it (`sft.steps = 0`).
"""

from __future__ import annotations

import random
from typing import Callable, Sequence

import torch

from tempering.records import Batch, Task
from tempering.tokenizer import Tokenizer
from tempering.trainer.step import StepStats, Trainer


def sft_batch(tokenizer: Tokenizer, tasks: Sequence[Task]) -> Batch:
    rows = []
    for t in tasks:
        prompt = tokenizer.encode(tokenizer.render(t.prompt, t.messages))
        target = tokenizer.encode(t.reference or "") + [tokenizer.eos_id]
        rows.append((prompt, target))
    n, width = len(rows), max(len(p) + len(c) for p, c in rows)
    ids = torch.full((n, width), tokenizer.pad_id, dtype=torch.long)
    mask = torch.zeros(n, width)
    lens = torch.zeros(n, dtype=torch.long)
    for i, (p, c) in enumerate(rows):
        ids[i, : len(p) + len(c)] = torch.tensor(p + c)
        mask[i, len(p): len(p) + len(c)] = 1
        lens[i] = len(p) + len(c)
    zeros = torch.zeros(n, width)
    return Batch(input_ids=ids, loss_mask=mask, old_logprobs=zeros, advantages=zeros,
                 versions=torch.full((n, width), -1, dtype=torch.long), seq_lens=lens,
                 group_ids=torch.arange(n))


def sft_warmup(trainer: Trainer, tokenizer: Tokenizer, examples: Sequence[Task], steps: int, batch_size: int,
               seed: int, on_step: Callable[[int, StepStats], None] | None = None) -> None:
    if not examples:
        raise ValueError("sft.steps > 0 but the task mix has no reference completions to learn from")
    rng = random.Random(seed)
    for step in range(steps):
        stats = trainer.sft_step(sft_batch(tokenizer, rng.sample(list(examples), min(batch_size, len(examples)))))
        if on_step is not None:
            on_step(step, stats)
