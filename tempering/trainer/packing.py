"""`Layout`: how the trainer lays one micro-batch out for the forward pass, and `token_logprobs`.

The n samples of a task share their prompt token for token, and one row per sample computes
that prompt n times, forward and backward: for short answers to a longer prompt (most RL
batches) that is most of the step. A shared-prompt layout holds each group's prompt once, then
every sample's completion; a completion attends to the prompt and to itself only, and its
positions continue from the prompt's end, so each token sees exactly the context (and rotary
positions) of its own row. The first completion token of every sample is scored by the
prompt's last position, which all of them share; the gradient adds up there as it would
across the separate rows. A completion's last token is left out: it scores nothing, and no
other token attends to it. Logprobs come back as one row per sample, [n, T-1] (position t
scores token t+1), so losses, aggregation and metrics never see the layout.

Samples whose prompt differs from their group's (or a batch built without `prompt_lens`) get a
packed row of their own, which is the plain layout. It does not pack unrelated samples into
one row, and it shares only the prompt, not the common turns of multi-turn episodes. Both paths
score tokens with `logprobs.head_logprobs`, in chunks: never a full `[tokens, vocab]` log-softmax.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from tempering.models import Decoder
from tempering.records import Batch
from tempering.trainer.critic import Critic
from tempering.trainer.logprobs import head_logprobs


def token_logprobs(model: Decoder, input_ids: torch.Tensor, temperature: float = 1.0,
                   with_entropy: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """input_ids [N, T] -> logprob of each next token [N, T-1] (position t scores input t+1),
    and optionally the entropy of each predictive distribution [N, T-1]."""
    targets = input_ids[:, 1:]

    def head(hidden: torch.Tensor, weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        return head_logprobs(hidden.flatten(0, 1), weight, targets.flatten(), temperature, with_entropy=with_entropy)

    # reshaped out here: a view returned from inside an FSDP2 module's forward draws a warning
    logp, entropy = model(input_ids[:, :-1], head=head)
    return logp.view(targets.shape), entropy.view(targets.shape) if entropy is not None else None


@dataclass
class Layout:
    """Packed rows for one micro-batch, and where each scored token goes back to."""

    input_ids: torch.Tensor  # [B, L] the packed rows (prompt once, then each completion)
    positions: torch.Tensor  # [B, L] each token's position in its own sample's row
    mask: torch.Tensor  # [B, 1, L, L] bool, True = may attend
    src: tuple[torch.Tensor, torch.Tensor]  # (b, l) of the packed position that scores each token
    dst: tuple[torch.Tensor, torch.Tensor]  # (row in the micro-batch, t) in the [n, T-1] output
    targets: torch.Tensor  # the token each scores
    shape: tuple[int, int]  # (n, T-1)

    def logprobs(self, model: Decoder, temperature: float = 1.0,
                 with_entropy: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The same as `token_logprobs` on the unpacked rows (to rounding), from one pass here."""
        def head(hidden: torch.Tensor, weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
            return head_logprobs(hidden[self.src], weight, self.targets, temperature, with_entropy=with_entropy)

        logp, entropy = model(self.input_ids, self.positions, self._attention, head=head)  # [M] each
        logp = logp.new_zeros(self.shape).index_put(self.dst, logp)
        if entropy is None:
            return logp, None
        return logp, entropy.new_zeros(self.shape).index_put(self.dst, entropy)

    def values(self, critic: Critic) -> torch.Tensor:
        """The same as `critic.values` on the unpacked rows (to rounding): [n, T-1]."""
        hidden = critic.model(self.input_ids, critic.inv_freq, self.positions, self._attention)
        return torch.zeros(self.shape).index_put(self.dst, critic.value_head(hidden[self.src]).squeeze(-1).float())

    def _attention(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=self.mask, enable_gqa=q.shape[1] != k.shape[1])


def shared_prompt_layout(batch: Batch, rows: torch.Tensor, width: int) -> Layout:
    """Lay out `rows` of `batch` (padded to `width`) with each group's prompt computed once."""
    ids = batch.input_ids[rows].tolist()  # python lists: the loops below index them token by token
    seq_lens, groups = batch.seq_lens[rows].tolist(), batch.group_ids[rows].tolist()
    prompt_lens = batch.prompt_lens[rows].tolist() if batch.prompt_lens is not None else seq_lens
    packs: dict[tuple, list[int]] = {}  # (group, prompt tokens) -> rows of the micro-batch
    for local in range(len(rows)):
        packs.setdefault((groups[local], tuple(ids[local][: prompt_lens[local]])), []).append(local)
    tokens, positions, segments = [], [], []
    src_b, src_l, dst_r, dst_t, targets = [], [], [], [], []
    for b, ((_, prompt), members) in enumerate(packs.items()):
        p = len(prompt)
        row, pos, seg = list(prompt), list(range(p)), [0] * p
        for i, local in enumerate(members, start=1):
            start, n, seq = len(row), seq_lens[local], ids[local]
            # a completion's last token scores nothing and nothing attends to it: it stays out
            row += seq[p: n - 1]
            pos += range(p, n - 1)
            seg += [i] * max(n - 1 - p, 0)
            # token j of the sample is scored by the position before it: in the prompt, or in its completion
            src_b += [b] * (n - 1)
            src_l += [j - 1 if j <= p else start + j - p - 1 for j in range(1, n)]
            dst_r += [local] * (n - 1)
            dst_t += range(n - 1)
            targets += seq[1:n]
        tokens.append(row)
        positions.append(pos)
        segments.append(seg)
    length = max(map(len, tokens))
    pad = lambda xs, v: torch.tensor([x + [v] * (length - len(x)) for x in xs])  # noqa: E731
    seg = pad(segments, -1)
    q, k = seg[:, :, None], seg[:, None, :]
    order = torch.arange(length)
    causal = order[None, :, None] >= order[None, None, :]
    # a prompt token sees the prompt; a completion, the prompt and itself; padding only itself
    mask = (causal & (k >= 0) & ((k == 0) | (k == q))) | ((q < 0) & (order[:, None] == order[None, :]))
    return Layout(pad(tokens, 0), pad(positions, 0), mask[:, None], (torch.tensor(src_b), torch.tensor(src_l)),
                  (torch.tensor(dst_r), torch.tensor(dst_t)), torch.tensor(targets), (len(rows), width - 1))
