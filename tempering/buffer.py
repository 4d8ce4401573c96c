"""`Buffer`: turns scored groups into a trainer `Batch`, enforcing the staleness bound; and the
lineage store that records the fate of every sample.

A sample is trained, or dropped with a reason: `stale` (its oldest model token is more than
`max_staleness` versions behind the trainer), `failed` (its reward is an infrastructure failure),
`uniform` (every surviving sample of its group scored the same, so no GRPO signal), or `alone`
(the only survivor of its group). Every sample passes through `LineageStore.record` exactly once.
Packing here is one right-padded row per sample; token-budget packing comes later.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch

from tempering.config import BufferConfig
from tempering.records import Batch, Group, Trajectory

DROP_REASONS = ("stale", "failed", "uniform", "alone")


@dataclass
class Accounting:
    trained: int = 0
    dropped: Counter = field(default_factory=Counter)

    @property
    def total(self) -> int:
        return self.trained + sum(self.dropped.values())


class LineageStore:
    """Append-only JSONL of samples: task, versions, reward components, fate, step."""

    def __init__(self, path: Path | None):
        self.path = path
        self._file = open(path, "a") if path is not None else None

    def record(self, group: Group, i: int, fate: str, step: int) -> None:
        if self._file is None:
            return
        t, r = group.trajectories[i], group.rewards[i]
        row = {"step": step, "task": t.task_id, "domain": t.domain, "prompt": group.task.prompt[:200],
               "sample": t.sample_index, "fate": fate,
               "versions": [min(t.versions, default=-1), max(t.versions, default=-1)],
               "tokens": t.num_model_tokens, "reward": r.total, "components": dict(r.components),
               "failed": r.failed, "reason": r.reason, "text": t.text[:200]}
        self._file.write(json.dumps(row) + "\n")

    def flush(self) -> None:
        if self._file is not None:
            self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()


class Buffer:
    def __init__(self, cfg: BufferConfig, advantage: Callable[[torch.Tensor], torch.Tensor],
                 lineage: LineageStore, pad_id: int = 0):
        self.cfg = cfg
        self.advantage = advantage
        self.lineage = lineage
        self.pad_id = pad_id

    def make_batch(self, groups: list[Group], version: int, step: int) -> tuple[Batch | None, list[Group], Accounting]:
        """Filter `groups` for a trainer at `version`; compute advantages; pack the survivors."""
        acct = Accounting()
        kept: list[Group] = []
        for g in groups:
            survivor = self._filter(g, version, step, acct)
            if survivor is not None:
                kept.append(survivor)
        self.lineage.flush()
        if not kept:
            return None, [], acct
        return self._pack(kept), kept, acct

    def _filter(self, g: Group, version: int, step: int, acct: Accounting) -> Group | None:
        fates: dict[int, str] = {}
        for i, (t, r) in enumerate(zip(g.trajectories, g.rewards)):
            if r.failed:
                fates[i] = "failed"
            elif version - t.oldest_version > self.cfg.max_staleness:
                fates[i] = "stale"
        alive = [i for i in range(len(g.trajectories)) if i not in fates]
        totals = [g.rewards[i].total for i in alive]
        if len(alive) == 1:
            fates[alive[0]] = "alone"
        elif alive and self.cfg.drop_uniform_groups and max(totals) == min(totals):
            fates.update({i: "uniform" for i in alive})
        alive = [i for i in alive if i not in fates]
        for i in range(len(g.trajectories)):
            fate = fates.get(i, "trained")
            self.lineage.record(g, i, fate, step)
            if fate == "trained":
                acct.trained += 1
            else:
                acct.dropped[fate] += 1
        if not alive:
            return None
        rewards = torch.tensor([g.rewards[i].total for i in alive], dtype=torch.float32)
        return Group(task=g.task, trajectories=[g.trajectories[i] for i in alive],
                     rewards=[g.rewards[i] for i in alive], advantages=self.advantage(rewards).tolist())

    def _pack(self, groups: list[Group]) -> Batch:
        rows = [(t, a, gi) for gi, g in enumerate(groups) for t, a in zip(g.trajectories, g.advantages)]
        return pack(rows, self.pad_id)


def pack(rows: list[tuple[Trajectory, float, int]], pad_id: int) -> Batch:
    """(trajectory, advantage, group index) rows -> one right-padded `Batch` row each."""
    width = max(len(t.prompt_ids) + len(t.token_ids) for t, _, _ in rows)
    n = len(rows)
    batch = Batch(
        input_ids=torch.full((n, width), pad_id, dtype=torch.long),
        loss_mask=torch.zeros(n, width), old_logprobs=torch.zeros(n, width),
        advantages=torch.zeros(n, width), versions=torch.full((n, width), -1, dtype=torch.long),
        seq_lens=torch.zeros(n, dtype=torch.long), group_ids=torch.zeros(n, dtype=torch.long))
    for i, (t, adv, gi) in enumerate(rows):
        _fill_row(batch, i, t, adv)
        batch.group_ids[i] = gi
    return batch


def _fill_row(batch: Batch, i: int, t: Trajectory, adv: float) -> None:
    p, c = len(t.prompt_ids), len(t.token_ids)
    batch.input_ids[i, : p + c] = torch.tensor(t.prompt_ids + t.token_ids)
    mask = torch.tensor(t.loss_mask, dtype=torch.float32)
    batch.loss_mask[i, p: p + c] = mask
    batch.old_logprobs[i, p: p + c] = torch.tensor(t.logprobs)
    batch.advantages[i, p: p + c] = adv * mask
    batch.versions[i, p: p + c] = torch.tensor(t.versions)
    batch.seq_lens[i] = p + c
