"""`Trainer`: one optimizer step of RL (a policy objective of the PPO family) or SFT (cross-entropy).

Logprobs are recomputed with the rollout's sampling temperature, so they are the same quantity
the engine returned and the importance ratio is exactly 1 for fresh samples. Rows are run in
micro-batches of about `trainer.micro_batch_tokens` tokens; token weights (and GAE advantages,
which need whole rows and whitening over the batch) are computed on the whole batch first, so
accumulation gives exactly the full-batch gradient. A batch is one optimizer step, or
`algorithm.mini_batches` steps each on its share of the groups (PPO's mini-batches), and one
step of the LR schedule. With one step the proximal policy of decoupled PPO is the forward
pass's own detached logprobs; with several it is a no-grad pass before the first, as are the
critic's start values (`micro_batch`: how a batch is split). A group's shared prompt is computed
once (`packing`). The reference model (kl_coef > 0) and the critic (advantage gae) are copies of
the policy as RL starts, after any SFT warm-up; both go into `state_dict`. The loss terms are pure
functions in `tempering.algorithms`. Given `ranks` (FSDP2, `parallelize`), the
model is already sharded and every rank holds the whole batch: it trains its share of the groups
with the whole batch's token weights, gradients are summed over the ranks, and the step's totals
and off-policy tokens are gathered, so the step is the single-process one (GAE is refused there).
"""

from __future__ import annotations

import contextlib
import copy
import math
from typing import TYPE_CHECKING

import torch

from tempering.algorithms import KL_ESTIMATORS, PolicyLoss, get_aggregation, get_objective
from tempering.algorithms.advantages import gae, last_token_rewards, whiten
from tempering.algorithms.losses import k3, truncated_is_weight
from tempering.config import AlgorithmConfig, TrainerConfig
from tempering.models import Decoder
from tempering.models.lora import adapters, adapters_off
from tempering.records import Batch
from tempering.trainer.critic import Critic, critic_optimizer, value_backward
from tempering.trainer.lr_schedule import lr_scheduler
from tempering.trainer.micro_batch import MicroSlice, Targets, micro_batches, micro_slice, mini_batches
from tempering.trainer.offpolicy import OffPolicyMeter
from tempering.trainer.packing import Layout, shared_prompt_layout, token_logprobs
from tempering.trainer.stats import StepStats, rl_stats

if TYPE_CHECKING:
    from tempering.trainer.parallelize import Ranks


class Trainer:
    def __init__(self, model: Decoder, cfg: TrainerConfig, algo: AlgorithmConfig | None = None,
                 temperature: float = 1.0, norm_tokens: int = 1, total_steps: int = 0,
                 ranks: Ranks | None = None):
        self.model = model  # sharded already under `ranks`: the optimizer below takes its sharded parameters
        self.ranks = ranks
        self.cfg = cfg
        self.algo = algo = algo or AlgorithmConfig()
        if ranks is not None:
            ranks.check(algo)
        self.objective = get_objective(algo.loss)
        self.aggregate = get_aggregation(algo.aggregation)
        self.kl = KL_ESTIMATORS[algo.kl_estimator]
        self.clip = (algo.gspo_clip_low, algo.gspo_clip_high) if algo.loss == "gspo" else (algo.clip_low, algo.clip_high)
        self.temperature = temperature
        self.norm_tokens = norm_tokens  # the generation budget, for seq_sum_const
        self.total_steps = total_steps  # the LR schedule's length
        self.reference: Decoder | None = None
        self.critic: Critic | None = None
        self.critic_optimizer: torch.optim.Optimizer | None = None
        # with LoRA adapters (models.lora) only they train: the base's frozen weights carry no state
        self.lora = bool(adapters(model))
        self.optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=cfg.lr,
                                           betas=(cfg.beta1, cfg.beta2), weight_decay=cfg.weight_decay)
        self.scheduler = lr_scheduler(self.optimizer, cfg, total_steps)

    def rl_step(self, batch: Batch) -> StepStats:
        """One batch: `algorithm.mini_batches` optimizer steps, each on its share of the groups
        (PPO's mini-batches; one by default), and one step of the LR schedule."""
        if self.ranks is not None and self.ranks.shape.pp > 1:  # the loss on the last stage of a pipeline
            from tempering.trainer.pipeline_step import pipeline_rl_step
            return pipeline_rl_step(self, batch)
        self._start_rl()
        self.model.train()
        mask = batch.loss_mask[:, 1:]
        parts = mini_batches(batch, self.algo.mini_batches)
        # the optimizer steps' own micro-batches (under FSDP, each rank's targets are of its own rows)
        micro = [rows for part in parts for rows in self._micro_batches(batch, part)]
        targets = self._targets(batch, mask, micro + self._padding(batch, micro))
        meter = OffPolicyMeter(self.algo.is_cap)
        totals, norms = torch.zeros(6), []
        for part in parts:
            weights = torch.zeros_like(mask)  # each optimizer step's loss is over its own rows
            weights[part] = self.aggregate(mask[part], self.norm_tokens)
            micro = self._micro_batches(batch, part)
            padding = self._padding(batch, micro)  # (a collective: before any pass)
            for rows in micro:
                totals += self._micro_step(batch, rows, mask, weights, targets, meter)
            for rows in padding:  # weight 0, and its totals and tokens are dropped
                self._micro_step(batch, rows, mask, torch.zeros_like(mask), targets, OffPolicyMeter(0.0))
            norms.append(self._apply())
        self.scheduler.step()
        if self.ranks is not None:  # each rank has summed its own share of the rows
            totals, meter = self.ranks.sum(totals), self.ranks.merge(meter)
        return rl_stats(totals, meter, norms, batch, self.scheduler.get_last_lr()[0], self.critic is not None)

    def _micro_step(self, batch: Batch, rows: torch.Tensor, mask: torch.Tensor, weights: torch.Tensor,
                    targets: Targets, meter: OffPolicyMeter) -> torch.Tensor:
        """Forward and backward of one micro-batch (gradients accumulate). -> sums of: loss,
        kl_behavior, kl_ref, entropy, clipped tokens, value loss"""
        width = int(batch.seq_lens[rows].max())
        ids = batch.input_ids[rows, :width]
        layout = shared_prompt_layout(batch, rows, width) if self._sharing(batch) else None
        logp, entropy = self._logprobs(self.model, batch, rows, width, True, layout)
        ref = None
        if self.reference is not None or (self.lora and self.algo.kl_coef > 0):
            with torch.no_grad(), (adapters_off(self.model) if self.lora else contextlib.nullcontext()):
                ref, _ = self._logprobs(self.reference or self.model, batch, rows, width, layout=layout)
        part = micro_slice(batch, rows, width, mask, weights, targets)
        loss, sums = self._loss(logp, entropy, ref, part, meter)
        loss.backward()
        v_loss = torch.zeros(())
        if self.critic is not None:
            v_loss = value_backward(self.critic, ids, rows, part.weights, targets, layout, self.algo.value_clip)
        return torch.cat([sums, v_loss[None]])

    def _loss(self, logp: torch.Tensor, entropy: torch.Tensor | None, ref: torch.Tensor | None, part: MicroSlice,
              meter: OffPolicyMeter) -> tuple[torch.Tensor, torch.Tensor]:
        """One micro-batch's policy loss (weighted over the whole batch) from its logprobs and
        entropy [n, T-1] and the reference's logprobs (None: no KL term). -> the loss, and sums of:
        loss, kl_behavior, kl_ref, entropy, clipped tokens"""
        m, behaviour = part.mask, part.behaviour
        # the policy at the step's start: this pass's own logprobs before the first optimizer step
        proximal = logp.detach() if part.proximal is None else part.proximal
        meter.add(proximal, behaviour, m, part.versions, part.version)
        policy = self._policy_loss(logp, proximal, behaviour, part.advantages, m)
        per_token = policy.loss
        if self.algo.entropy_coef > 0:  # else the entropy stays a metric, outside the graph
            per_token = per_token - self.algo.entropy_coef * entropy
        kl_ref = torch.zeros_like(logp)
        if ref is not None:
            kl_ref = self.kl(logp, ref)
            per_token = per_token + self.algo.kl_coef * kl_ref
        loss = (per_token * part.weights).sum()
        with torch.no_grad():
            return loss, torch.stack([loss.detach(), (k3(logp, behaviour) * m).sum(), (kl_ref * m).sum(),
                                      (entropy * m).sum(), (policy.clipped.float() * m).sum()])

    def _policy_loss(self, logp: torch.Tensor, proximal: torch.Tensor, behaviour: torch.Tensor, adv: torch.Tensor,
                     mask: torch.Tensor) -> PolicyLoss:
        if self.algo.off_policy == "behaviour":
            return self.objective(logp, behaviour, adv, mask, *self.clip)
        # Decoupled PPO: the ratio is against the proximal policy (the weights at the step's
        # start) and the (truncated, detached) importance weight proximal / behaviour corrects
        # for the samples' staleness.
        weight, _ = truncated_is_weight((proximal - behaviour) * (mask > 0), self.algo.is_cap)
        out = self.objective(logp, proximal, adv, mask, *self.clip)
        return PolicyLoss(out.loss * weight, out.clipped)

    def _targets(self, batch: Batch, mask: torch.Tensor, micro: list[torch.Tensor]) -> Targets:
        """Advantages per token: the buffer's, or GAE from the critic's values at the step's start
        (whole rows, then whitened over the batch's tokens); and the proximal logprobs when
        several optimizer steps follow."""
        proximal = None
        if self.algo.off_policy == "decoupled" and self.algo.mini_batches > 1:
            proximal = torch.zeros_like(mask)
            with torch.no_grad():
                for rows in micro:
                    width = int(batch.seq_lens[rows].max())
                    proximal[rows, : width - 1] = self._logprobs(self.model, batch, rows, width)[0]
        if self.critic is None:
            return Targets(batch.advantages[:, 1:], proximal=proximal)
        values = torch.zeros_like(mask)
        with torch.no_grad():
            for rows in micro:
                width = int(batch.seq_lens[rows].max())
                values[rows, : width - 1] = self._values(batch, rows, width)
        values = values * mask
        adv, returns = gae(last_token_rewards(batch.rewards, mask), values, mask, self.algo.gamma, self.algo.lam)
        if self.algo.whiten_advantages:
            adv = whiten(adv, mask)
        return Targets(adv, values, returns, proximal)

    def _logprobs(self, model: Decoder, batch: Batch, rows: torch.Tensor, width: int, with_entropy: bool = False,
                  layout: Layout | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """`model`'s logprobs of `rows` [n, width-1]: shared prompts packed, or one row per sample."""
        if layout is None and self._sharing(batch):
            layout = shared_prompt_layout(batch, rows, width)
        if layout is not None:
            return layout.logprobs(model, self.temperature, with_entropy)
        return token_logprobs(model, batch.input_ids[rows, :width], self.temperature, with_entropy)

    def _values(self, batch: Batch, rows: torch.Tensor, width: int, layout: Layout | None = None) -> torch.Tensor:
        """The critic's values of `rows` [n, width-1]: shared prompts packed, or one row per sample."""
        assert self.critic is not None
        if layout is None and self._sharing(batch):
            layout = shared_prompt_layout(batch, rows, width)
        return layout.values(self.critic) if layout is not None else self.critic.values(batch.input_ids[rows, :width])

    def _start_rl(self) -> None:
        """The reference and the critic are copies of the policy as RL starts (after any SFT
        warm-up: a copy made earlier would anchor RL to the untrained model), unless
        `load_state_dict` restored them from a checkpoint."""
        if self.algo.kl_coef > 0 and self.reference is None and not self.lora:  # LoRA: the base, adapters off
            self.reference = self._frozen_copy()
        if self.algo.advantage == "gae" and self.critic is None:
            self.critic = Critic(self.model)
            self.critic_optimizer = critic_optimizer(self.critic, self.algo.value_lr, (self.cfg.beta1, self.cfg.beta2),
                                                     self.cfg.weight_decay)

    def sft_step(self, batch: Batch) -> StepStats:
        """Cross-entropy on the masked (completion) tokens, averaged over tokens."""
        if self.ranks is not None:
            self.ranks.check_sft()
        self.model.train()
        mask = batch.loss_mask[:, 1:]
        n = max(float(mask.sum()), 1.0)
        total = torch.zeros(1)
        micro = self._micro_batches(batch)
        for i, rows in enumerate(micro + self._padding(batch, micro)):
            width = int(batch.seq_lens[rows].max())
            logp, _ = token_logprobs(self.model, batch.input_ids[rows, :width])
            loss = -(logp * mask[rows, : width - 1]).sum() / n
            if i >= len(micro):  # a padding pass (FSDP) weighs nothing
                loss = loss * 0.0
            loss.backward()
            total += loss.detach()
        total = self.ranks.sum(total) if self.ranks is not None else total
        grad_norm, _ = self._apply()
        self.scheduler.step()
        return StepStats(loss=float(total), kl_behavior=0.0, kl_ref=0.0, entropy=0.0, clip_fraction=0.0,
                         grad_norm=grad_norm, tokens=int(n), lr=self.scheduler.get_last_lr()[0])

    def _apply(self) -> tuple[float, float]:
        """Clip, step and clear the policy (and the critic, when there is one); the LR schedule
        steps once per batch, apart. -> grad norms"""
        trained = [p for p in self.model.parameters() if p.requires_grad]
        if self.ranks is not None:  # gradients sharded over mesh dimensions of their own
            grad_norm = self.ranks.clip_grad_norm(trained, self.cfg.grad_clip)
        else:
            grad_norm = float(torch.nn.utils.clip_grad_norm_(trained, self.cfg.grad_clip))
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        value_grad_norm = math.nan
        if self.critic is not None and self.critic_optimizer is not None:
            value_grad_norm = float(torch.nn.utils.clip_grad_norm_(self.critic.parameters(), self.cfg.grad_clip))
            self.critic_optimizer.step()
            self.critic_optimizer.zero_grad(set_to_none=True)
        return grad_norm, value_grad_norm

    def _sharing(self, batch: Batch) -> bool:
        return self.cfg.share_prompts and batch.prompt_lens is not None

    def _padding(self, batch: Batch, micro: list[torch.Tensor]) -> list[torch.Tensor]:
        """FSDP: rows for passes at weight 0, so that every rank runs as many passes as the busiest
        (each pass gathers every rank's shards); none in a single process."""
        return [] if self.ranks is None else self.ranks.padding(batch, micro)

    def _frozen_copy(self) -> Decoder:
        """The reference: a frozen copy of the policy, sharded like it under FSDP."""
        return _frozen_copy(self.model) if self.ranks is None else self.ranks.frozen_copy(self.model)

    def _micro_batches(self, batch: Batch, rows: torch.Tensor | None = None) -> list[torch.Tensor]:
        """This rank's micro-batches of `rows` (default all): `micro_batch.micro_batches`."""
        return micro_batches(batch, rows, self.cfg.micro_batch_tokens, self._sharing(batch), self.ranks)

    def state_dict(self) -> dict:
        """Optimizer and schedule; the reference model and the critic with its optimizer once RL
        has started (a resumed run keeps its anchor and its value model)."""
        state = {"optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict()}
        if self.reference is not None:
            state["reference"] = self.reference.state_dict()
        if self.critic is not None and self.critic_optimizer is not None:
            state["critic"] = self.critic.state_dict()
            state["critic_optimizer"] = self.critic_optimizer.state_dict()
        return state

    def load_state_dict(self, state: dict) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        if "reference" in state and self.algo.kl_coef > 0 and not self.lora:
            self.reference = self._frozen_copy()
            self.reference.load_state_dict(state["reference"])
        if "critic" in state and self.algo.advantage == "gae":
            self._start_rl()
            assert self.critic is not None and self.critic_optimizer is not None
            self.critic.load_state_dict(state["critic"])
            self.critic_optimizer.load_state_dict(state["critic_optimizer"])


def _frozen_copy(model: Decoder) -> Decoder:
    ref = copy.deepcopy(model).eval()
    for p in ref.parameters():
        p.requires_grad_(False)
    return ref
