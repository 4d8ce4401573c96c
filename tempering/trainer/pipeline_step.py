"""One RL step of `Trainer` on a pipeline of stages (`trainer.parallelize.pp > 1`).

The same step as `Trainer.rl_step`, with its forward and backward passes run by a 1F1B schedule
(`pipeline.run_schedule`) over the stages of the cut model. Every rank holds the whole batch.
Each optimizer step's rows (PPO's mini-batch) are padded to their longest row and split into
micro-batches of equal shape (pipelining fixes the activations' shapes per schedule): about
`trainer.micro_batch_tokens` tokens each, at least one per stage and a multiple of `pp`, the
last ones topped up with copies of a row at weight 0. The last stage scores the final hidden
states with the LM head (`head_logprobs`, chunked as ever) and computes each micro-batch's loss
with the trainer's own `Trainer._loss`, so the loss terms, token weights (over the whole
mini-batch) and the off-policy meter are those of the single-process step. The reference's
logprobs and, with several mini-batches, decoupled PPO's proximal ones come from forward-only
passes of the pipeline before the first optimizer step. After each schedule the tied
embedding's gradient is summed over its two copies (`pipeline.sync_tied_grads`); the gradient
norm is reduced over the stages (`Ranks.clip_grad_norm`). The last stage's sums and meter are
broadcast to the other ranks, so every rank reports the step's stats, and `pipeline_bubble` (the
training schedule's idle share, from its action list) with them.

With data parallel (`Pipe.layout`) each data-parallel rank's pipeline trains its share of each
mini-batch's rows (dealt by tokens, token weights still over the whole mini-batch), every one
running as many micro-batches as the busiest (FSDP gathers a stage over its data-parallel ranks);
the stats are summed over the pipelines. Not here: shared-prompt packing (rows go one per sample,
causal attention), LoRA, the critic, SFT steps (refused by `Ranks`), and tensor parallel.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist

from tempering.records import Batch
from tempering.trainer.logprobs import head_logprobs
from tempering.trainer.offpolicy import OffPolicyMeter
from tempering.trainer.pipeline import gathered_head, run_schedule, sync_tied_grads
from tempering.trainer.micro_batch import Targets, micro_slice, mini_batches
from tempering.trainer.stats import StepStats, rl_stats
from tempering.trainer.step import Trainer

if TYPE_CHECKING:
    from tempering.models import Decoder
    from tempering.trainer.parallelize import Ranks


@dataclass(frozen=True)
class Rows:
    """Some rows of the batch laid out for the pipeline: `microbatches` of equal shape."""

    ids: torch.Tensor  # [R, W] token ids, R a multiple of `microbatches`
    index: torch.Tensor  # [R] each row's row in the batch (the padding rows repeat the last)
    live: torch.Tensor  # [R] False for the padding rows
    microbatches: int


def microbatch_count(batch: Batch, rows: torch.Tensor, tokens: int, pp: int) -> int:
    """How many micro-batches of about `tokens` tokens `rows` padded to their longest make (at
    least one row each), rounded up to a multiple of `pp` (each stage has work)."""
    if len(rows) == 0:
        return pp
    per = max(1, tokens // int(batch.seq_lens[rows].max()))
    return math.ceil(math.ceil(len(rows) / per) / pp) * pp


def pipeline_rows(batch: Batch, rows: torch.Tensor, tokens: int, pp: int, microbatches: int = 0) -> Rows:
    """`rows` padded to their longest, in `microbatches` (at least `microbatch_count`'s) of
    equal shape; no rows: one padding row (a data-parallel rank with nothing of a mini-batch)."""
    count = max(microbatches, microbatch_count(batch, rows, tokens, pp))
    live_rows = len(rows)
    if live_rows == 0:
        rows = torch.tensor([int(batch.seq_lens.argmin())])
    width = int(batch.seq_lens[rows].max())
    per = math.ceil(len(rows) / count)
    total = count * per
    index = torch.cat([rows, rows[-1:].expand(total - len(rows))])
    live = torch.arange(total) < live_rows
    return Rows(batch.input_ids[index, :width], index, live, count)


@dataclass(frozen=True)
class Pipe:
    """This rank's place in the pipeline, and in data parallel (`ranks`: each data-parallel rank's
    pipeline runs its share of the rows, as many micro-batches as the busiest one's: FSDP gathers
    a stage's weights over its data-parallel ranks at each micro-batch)."""

    rank: int
    pp: int
    per_rank: int
    group: dist.ProcessGroup
    ranks: Ranks

    @property
    def last(self) -> bool:
        return self.rank == self.pp - 1

    def layout(self, batch: Batch, parts: list[torch.Tensor], tokens: int) -> Rows:
        """This data-parallel rank's rows of `parts` (dealt part by part, by tokens), for the pipeline."""
        shares: list[list[int]] = [[] for _ in range(self.ranks.shape.dp)]
        for part in parts:
            for d, share in enumerate(self.ranks.shares({r: int(batch.seq_lens[r]) for r in part.tolist()})):
                shares[d] += sorted(share)
        rows = [torch.tensor(share, dtype=torch.long) for share in shares]
        count = max(microbatch_count(batch, r, tokens, self.pp) for r in rows)
        return pipeline_rows(batch, rows[self.ranks.dp_rank], tokens, self.pp, count)

    def logprobs(self, model: Decoder, batch: Batch, rows: list[torch.Tensor], tokens: int,
                 temperature: float) -> torch.Tensor:
        """A forward-only pass of `model`'s stages over this data-parallel rank's share of `rows`
        (parts): their logprobs in a [N, T-1] tensor of the batch's shape on the last stage (zeros
        elsewhere, and on the other ranks)."""
        out = torch.zeros(batch.input_ids.shape[0], batch.input_ids.shape[1] - 1)
        lay = self.layout(batch, rows, tokens)
        with torch.no_grad():
            hidden, _ = run_schedule(model, self.rank, self.pp, self.per_rank, self.group, lay.ids, lay.microbatches)
            if hidden is not None:
                width = lay.ids.shape[1]
                with gathered_head(model) as head:
                    logp, _ = head_logprobs(hidden[:, :-1].flatten(0, 1), head, lay.ids[:, 1:].flatten(), temperature)
                live = lay.index[lay.live]
                out[live, : width - 1] = logp.view(-1, width - 1)[lay.live].to(out.dtype)
        return out

    def share(self, totals: torch.Tensor, meter: OffPolicyMeter) -> tuple[torch.Tensor, OffPolicyMeter]:
        """The last stage's sums and meter, on every rank."""
        src = dist.get_global_rank(self.group, self.pp - 1)
        dist.broadcast(totals, src=src, group=self.group)
        box = [meter]
        dist.broadcast_object_list(box, src=src, group=self.group)
        return totals, box[0]


def pipeline_rl_step(trainer: Trainer, batch: Batch) -> StepStats:
    """`Trainer.rl_step` on the pipeline `trainer.ranks` lays out."""
    ranks = trainer.ranks
    assert ranks is not None
    pipe = Pipe(ranks.mesh.get_local_rank("pp"), ranks.shape.pp, ranks.shape.stages_per_rank,
                ranks.mesh.get_group("pp"), ranks)
    trainer._start_rl()
    trainer.model.train()
    tokens, temperature = trainer.cfg.micro_batch_tokens, trainer.temperature
    mask = batch.loss_mask[:, 1:]
    parts = mini_batches(batch, trainer.algo.mini_batches)
    proximal = None
    if trainer.algo.off_policy == "decoupled" and trainer.algo.mini_batches > 1:
        proximal = pipe.logprobs(trainer.model, batch, parts, tokens, temperature)
    ref = pipe.logprobs(trainer.reference, batch, parts, tokens, temperature) if trainer.reference is not None else None
    targets = Targets(batch.advantages[:, 1:], proximal=proximal)
    meter = OffPolicyMeter(trainer.algo.is_cap)
    totals, norms, bubble = torch.zeros(6), [], math.nan
    tied = trainer.model.arch.tie_word_embeddings
    for part in parts:
        weights = torch.zeros_like(mask)  # each optimizer step's loss is over its own rows
        weights[part] = trainer.aggregate(mask[part], trainer.norm_tokens)
        lay = pipe.layout(batch, [part], tokens)
        width = lay.ids.shape[1]

        def loss_fn(hidden: torch.Tensor, at: torch.Tensor) -> torch.Tensor:
            """One micro-batch's loss on the last stage: `at` are its places in `lay`."""
            nonlocal totals
            logp, entropy = head_logprobs(hidden[:, :-1].flatten(0, 1), trainer.model.lm_head.weight,
                                          lay.ids[at, 1:].flatten(), temperature, with_entropy=True)
            shape = (len(at), width - 1)
            rows, live = lay.index[at], lay.live[at, None].float()
            cut = micro_slice(batch, rows, width, mask, weights, targets)
            cut.mask, cut.weights = cut.mask * live, cut.weights * live  # padding rows weigh nothing
            loss, sums = trainer._loss(logp.view(shape), entropy.view(shape),
                                       None if ref is None else ref[rows, : width - 1], cut, meter)
            totals[:5] += sums
            return loss

        _, bubble = run_schedule(trainer.model, pipe.rank, pipe.pp, pipe.per_rank, pipe.group, lay.ids,
                                 lay.microbatches, loss_fn, target=torch.arange(len(lay.index)))
        sync_tied_grads(trainer.model, tied, pipe.group, (ranks.dp_rank, ranks.shape.dp))
        norms.append(trainer._apply())
    trainer.scheduler.step()
    totals, meter = pipe.share(totals, meter)
    totals, meter = ranks.sum(totals), ranks.merge(meter)  # over the data-parallel pipelines
    return rl_stats(totals, meter, norms, batch, trainer.scheduler.get_last_lr()[0], False, pipeline_bubble=bubble)
