"""`Buffer`: turns scored groups into a trainer `Batch`, enforcing the staleness bound, and hands
every sample's fate to the lineage store (`tempering.lineage`, which owns how it is kept).

A sample is trained, or dropped with a reason: `stale` (its oldest model token is more than
`max_staleness` versions behind the trainer), `failed` (its reward is an infrastructure failure),
`uniform` (every surviving sample of its group scored the same, so no GRPO signal), or `alone`
(the only survivor of its group, when the advantage is group-relative and so 0 for it). Every
sample passes through the store's `record` exactly once. Rewards are shaped first (DAPO's
overlong penalty, recorded as the component `overlong`), then advantages are computed once over
the whole batch of survivors (batch-normalised ones need every group). Packing here is one
right-padded row per sample; token-budget packing comes later. Refilling uniform groups
(dynamic sampling) is the rollout service's job, not this one's.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Sequence

import torch

from tempering.algorithms import AdvantageSpec, Overlong
from tempering.config import BufferConfig
from tempering.lineage import LineageStore
from tempering.records import Batch, Group, Reward, Trajectory

DROP_REASONS = ("stale", "failed", "uniform", "alone")


@dataclass
class Accounting:
    trained: int = 0
    dropped: Counter = field(default_factory=Counter)

    @property
    def total(self) -> int:
        return self.trained + sum(self.dropped.values())


class Buffer:
    def __init__(self, cfg: BufferConfig, advantage: AdvantageSpec, lineage: LineageStore, pad_id: int = 0,
                 overlong: Overlong = Overlong()):
        self.cfg = cfg
        self.advantage = advantage
        self.lineage = lineage
        self.pad_id = pad_id
        self.overlong = overlong

    def make_batch(self, groups: list[Group], version: int, step: int) -> tuple[Batch | None, list[Group], Accounting]:
        """Filter `groups` for a trainer at `version`; compute advantages; pack the survivors."""
        acct = Accounting()
        kept: list[Group] = []
        for g in groups:
            survivor = self._filter(self._shaped(g), version, step, acct)
            if survivor is not None:
                kept.append(survivor)
        if not kept:
            return None, [], acct
        self._advantages(kept)
        return self._pack(kept, version), kept, acct

    def _shaped(self, g: Group) -> Group:
        """`g` with the overlong penalty added to each reward (failed rewards stay as they are)."""
        if not self.overlong.active:
            return g
        penalties = self.overlong([t.num_model_tokens for t in g.trajectories], g.task.budget.max_tokens)
        rewards = [r if r.failed else _with_penalty(r, p) for r, p in zip(g.rewards, penalties)]
        return Group(task=g.task, trajectories=g.trajectories, rewards=rewards, advantages=g.advantages)

    def _filter(self, g: Group, version: int, step: int, acct: Accounting) -> Group | None:
        fates: dict[int, str] = {}
        for i, (t, r) in enumerate(zip(g.trajectories, g.rewards)):
            if r.failed:
                fates[i] = "failed"
            elif version - t.oldest_version > self.cfg.max_staleness:
                fates[i] = "stale"
        alive = [i for i in range(len(g.trajectories)) if i not in fates]
        totals = [g.rewards[i].total for i in alive]
        if len(alive) == 1 and self.advantage.group_relative:
            fates[alive[0]] = "alone"
        elif len(alive) > 1 and self.cfg.drop_uniform_groups and max(totals) == min(totals):
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
        return Group(task=g.task, trajectories=[g.trajectories[i] for i in alive], rewards=[g.rewards[i] for i in alive])

    def _advantages(self, groups: list[Group]) -> None:
        """Fill each group's advantages, computed over all of them at once (0: the trainer's)."""
        rewards = torch.tensor([r.total for g in groups for r in g.rewards], dtype=torch.float32)
        group_ids = torch.tensor([gi for gi, g in enumerate(groups) for _ in g.rewards])
        fn = self.advantage.fn
        adv = fn(rewards, group_ids).tolist() if fn is not None else [0.0] * len(rewards)
        start = 0
        for g in groups:
            g.advantages = adv[start: start + len(g.rewards)]
            start += len(g.rewards)

    def _pack(self, groups: list[Group], version: int) -> Batch:
        rows = [(t, a, gi) for gi, g in enumerate(groups) for t, a in zip(g.trajectories, g.advantages)]
        return pack(rows, self.pad_id, [r.total for g in groups for r in g.rewards], version)


def _with_penalty(r: Reward, penalty: float) -> Reward:
    if penalty == 0:
        return r
    return Reward(components={**r.components, "overlong": penalty}, weights={**r.weights, "overlong": 1.0},
                  total=r.total + penalty, failed=r.failed, reason=r.reason)


def pack(rows: list[tuple[Trajectory, float, int]], pad_id: int, rewards: Sequence[float] = (),
         version: int = -1) -> Batch:
    """(trajectory, advantage, group index) rows -> one right-padded `Batch` row each; `rewards`
    (one per row, default 0) and `version` are carried along for the trainer. Rows are laid out
    in Python lists and become tensors once: a tensor per row and field costs more than the rest."""
    width = max(len(t.prompt_ids) + len(t.token_ids) for t, _, _ in rows)
    n = len(rows)
    ids, versions = [[pad_id] * width for _ in range(n)], [[-1] * width for _ in range(n)]
    mask, old, adv = ([[0.0] * width for _ in range(n)] for _ in range(3))
    for i, (t, a, _) in enumerate(rows):
        p, c = len(t.prompt_ids), len(t.token_ids)
        ids[i][: p + c] = t.prompt_ids + t.token_ids
        mask[i][p: p + c] = t.loss_mask
        old[i][p: p + c] = t.logprobs
        adv[i][p: p + c] = [a * m for m in t.loss_mask]
        versions[i][p: p + c] = t.versions
    return Batch(
        input_ids=torch.tensor(ids, dtype=torch.long), loss_mask=torch.tensor(mask, dtype=torch.float32),
        old_logprobs=torch.tensor(old, dtype=torch.float32), advantages=torch.tensor(adv, dtype=torch.float32),
        versions=torch.tensor(versions, dtype=torch.long),
        seq_lens=torch.tensor([len(t.prompt_ids) + len(t.token_ids) for t, _, _ in rows], dtype=torch.long),
        group_ids=torch.tensor([g for _, _, g in rows], dtype=torch.long),
        rewards=torch.tensor(list(rewards) or [0.0] * n, dtype=torch.float32), version=version,
        prompt_lens=torch.tensor([len(t.prompt_ids) for t, _, _ in rows], dtype=torch.long))
