"""`Trainer`: one optimizer step of RL (clipped policy gradient) or SFT (cross-entropy).

Logprobs are recomputed with the rollout's sampling temperature, so they are the same quantity
the engine returned and the importance ratio is exactly 1 for fresh samples. Rows are run in
micro-batches of about `trainer.micro_batch_tokens` tokens; token weights are computed on the
whole batch first, so accumulation gives exactly the full-batch gradient. FSDP2 is not here yet.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import torch

from tempering.algorithms import get_loss
from tempering.algorithms.losses import k3_kl
from tempering.config import AlgorithmConfig, TrainerConfig
from tempering.models import Decoder
from tempering.records import Batch


@dataclass
class StepStats:
    loss: float
    kl_behavior: float  # k3 estimate of KL(current || behaviour policy) on trained tokens
    kl_ref: float  # k3 estimate of KL(current || reference); 0 without a reference model
    entropy: float
    clip_fraction: float
    grad_norm: float
    tokens: int
    lr: float


def token_logprobs(model: Decoder, input_ids: torch.Tensor, temperature: float = 1.0,
                   with_entropy: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """input_ids [N, T] -> logprob of each next token [N, T-1] (position t scores input t+1),
    and optionally the entropy of each predictive distribution [N, T-1]."""
    logits = model(input_ids[:, :-1]) / temperature
    logp_all = torch.log_softmax(logits, dim=-1)
    logp = logp_all.gather(-1, input_ids[:, 1:, None]).squeeze(-1)
    entropy = -(logp_all.exp() * logp_all).sum(-1) if with_entropy else None
    return logp, entropy


class Trainer:
    def __init__(self, model: Decoder, cfg: TrainerConfig, algo: AlgorithmConfig | None = None,
                 temperature: float = 1.0, norm_tokens: int = 1, total_steps: int = 0):
        self.model = model
        self.cfg = cfg
        self.algo = algo or AlgorithmConfig()
        self.loss = get_loss(self.algo.loss)
        self.temperature = temperature
        self.norm_tokens = norm_tokens
        self.reference = _frozen_copy(model) if self.algo.kl_coef > 0 else None
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, betas=(cfg.beta1, cfg.beta2),
                                           weight_decay=cfg.weight_decay)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lambda s: lr_factor(cfg, s, total_steps))

    def rl_step(self, batch: Batch) -> StepStats:
        self.model.train()
        mask = batch.loss_mask[:, 1:]
        weights = self.loss.weighting(mask, self.norm_tokens)
        totals = torch.zeros(5)  # loss, kl_behavior, kl_ref, entropy, clipped tokens
        for rows in self._micro_batches(batch):
            ids, m, w = batch.input_ids[rows], mask[rows], weights[rows]
            width = int(batch.seq_lens[rows].max())
            ids, m, w = ids[:, :width], m[:, : width - 1], w[:, : width - 1]
            logp, entropy = token_logprobs(self.model, ids, self.temperature, with_entropy=True)
            old = batch.old_logprobs[rows, 1:width]
            adv = batch.advantages[rows, 1:width]
            per_token = self.loss.token_loss(logp, old, adv, self.algo.clip_low, self.algo.clip_high)
            kl_ref = torch.zeros_like(logp)
            if self.reference is not None:
                with torch.no_grad():
                    ref, _ = token_logprobs(self.reference, ids, self.temperature)
                kl_ref = k3_kl(logp, ref)
                per_token = per_token + self.algo.kl_coef * kl_ref
            loss = (per_token * w).sum()
            loss.backward()
            with torch.no_grad():
                ratio = torch.exp(logp - old)
                clipped = ((ratio < 1 - self.algo.clip_low) | (ratio > 1 + self.algo.clip_high)).float()
                totals += torch.stack([loss.detach(), (k3_kl(logp, old) * m).sum(), (kl_ref * m).sum(),
                                       (entropy * m).sum(), (clipped * m).sum()])
        n = max(float(mask.sum()), 1.0)
        grad_norm = self._apply()
        return StepStats(loss=float(totals[0]), kl_behavior=float(totals[1]) / n, kl_ref=float(totals[2]) / n,
                         entropy=float(totals[3]) / n, clip_fraction=float(totals[4]) / n,
                         grad_norm=grad_norm, tokens=int(n), lr=self.scheduler.get_last_lr()[0])

    def sft_step(self, batch: Batch) -> StepStats:
        """Cross-entropy on the masked (completion) tokens, averaged over tokens."""
        self.model.train()
        mask = batch.loss_mask[:, 1:]
        n = max(float(mask.sum()), 1.0)
        total = 0.0
        for rows in self._micro_batches(batch):
            width = int(batch.seq_lens[rows].max())
            logp, _ = token_logprobs(self.model, batch.input_ids[rows, :width])
            loss = -(logp * mask[rows, : width - 1]).sum() / n
            loss.backward()
            total += float(loss.detach())
        grad_norm = self._apply()
        return StepStats(loss=total, kl_behavior=0.0, kl_ref=0.0, entropy=0.0, clip_fraction=0.0,
                         grad_norm=grad_norm, tokens=int(n), lr=self.scheduler.get_last_lr()[0])

    def _apply(self) -> float:
        grad_norm = float(torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.grad_clip))
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return grad_norm

    def _micro_batches(self, batch: Batch) -> list[torch.Tensor]:
        """Rows grouped by length, each group padded only to its own longest row and holding
        about `micro_batch_tokens` tokens: padding is compute the backward pass pays for too."""
        lens = batch.seq_lens.tolist()
        groups, current = [], []
        for row in sorted(range(len(lens)), key=lens.__getitem__):
            if current and (len(current) + 1) * lens[row] > self.cfg.micro_batch_tokens:
                groups.append(torch.tensor(current))
                current = []
            current.append(row)
        if current:
            groups.append(torch.tensor(current))
        return groups

    def state_dict(self) -> dict:
        return {"optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])


def lr_factor(cfg: TrainerConfig, step: int, total_steps: int) -> float:
    """Linear warm-up to 1, then constant or cosine down to `min_lr_ratio` at `total_steps`."""
    if step < cfg.warmup_steps:
        return (step + 1) / cfg.warmup_steps
    if cfg.schedule == "constant" or total_steps <= cfg.warmup_steps:
        return 1.0
    progress = min(1.0, (step - cfg.warmup_steps) / (total_steps - cfg.warmup_steps))
    return cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


def _frozen_copy(model: Decoder) -> Decoder:
    ref = copy.deepcopy(model).eval()
    for p in ref.parameters():
        p.requires_grad_(False)
    return ref
