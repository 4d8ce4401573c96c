"""Token logprobs and entropy from the final hidden states, in chunks of tokens over the LM head.

The full `[tokens, vocab]` log-softmax is the largest tensor of a training step with a large
vocabulary (a 16k-token micro-batch at 150k vocab is about 10 GB in fp32, and autograd keeps two or
three of them). Here the head runs on `chunk_tokens` rows at a time: the forward keeps only
each token's log-normaliser and entropy, and the backward recomputes one chunk's logits, turns
them into that chunk's gradient and adds it to the hidden states' and the head weight's, so
neither pass ever holds more than one chunk's `[chunk, vocab]` logits and probabilities. The
price is the head's forward matmul run twice. Two cases skip it: when everything fits in one
chunk (a small vocabulary), plain autograd runs the head once; and when the whole call's
log-probabilities fit `keep_elements` (on a CPU, a micro-batch of a real model's vocabulary),
the forward keeps them, in one buffer, for the backward to use in place of the recompute.

Gradients reach the hidden states and the head weight (tied or not: the caller passes whatever
tensor the head uses), through the logprobs and, when asked for, the entropy (the loss's
entropy bonus). It does not run the model, pick the scored positions or lay out rows (`packing`).
"""

from __future__ import annotations

import torch

from tempering.trainer.vocab_parallel import is_vocab_parallel, vocab_parallel_logprobs

# Elements of one chunk's fp32 logits. On a CPU small chunks are also the fast ones: the head's
# forward and backward at vocab 32k, 592 tokens, hidden 128, one thread took 0.42 s in 2-4M-element
# chunks against 0.59 s in one 19M-element chunk and 0.90 s as one plain log-softmax (buffers that
# stay in cache, no page faults on fresh 76 MB allocations). On an accelerator each chunk re-reads
# the whole head weight, so chunks must be large enough for the matmul to stay compute-bound: 32M
# elements (128 MB; 223 tokens at 150k) keeps a chunk's few buffers under a GB (not measured
# here: no GPU). Constants, not config keys: they trade speed for memory and no run reads them.
CPU_CHUNK_ELEMENTS = 1 << 22
ACCELERATOR_CHUNK_ELEMENTS = 1 << 25
# Elements of [tokens, vocab] fp32 log-probabilities the forward may keep for the backward. On a
# CPU the recompute is a quarter of the head's matmuls (SmolLM2: hidden 576, vocab 49k, a 2048-token
# micro-batch) and the kept 400 MB a small share of a real model's step: 512 MB buys it back. On an
# accelerator memory is the scarce side and the matmul cheap: always recompute (not measured here).
CPU_KEEP_ELEMENTS = 1 << 27
ACCELERATOR_KEEP_ELEMENTS = 0


def chunk_tokens(vocab_size: int, device: torch.device | str = "cpu") -> int:
    """Tokens per chunk so that one chunk's logits hold about the device's chunk of elements."""
    budget = CPU_CHUNK_ELEMENTS if torch.device(device).type == "cpu" else ACCELERATOR_CHUNK_ELEMENTS
    return max(1, budget // vocab_size)


def keep_elements(device: torch.device | str = "cpu") -> int:
    """How many log-probabilities the forward may keep for the backward on this device."""
    return CPU_KEEP_ELEMENTS if torch.device(device).type == "cpu" else ACCELERATOR_KEEP_ELEMENTS


def head_logprobs(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, temperature: float = 1.0,
                  chunk: int | None = None, with_entropy: bool = False,
                  keep: int | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """hidden [M, H] (after the final norm), weight [V, H] (the LM head's), targets [M] ->
    logprob of each target under softmax(hidden @ weight.T / temperature) [M] in fp32, and the
    entropy of each distribution [M] when asked. Logits are computed in the inputs' dtype and
    then cast to fp32, as `Decoder.forward` does. `chunk` tokens at a time (default from
    `chunk_tokens`); the [M, V] log-probabilities kept for the backward when M x V is at most
    `keep` (default from `keep_elements`; 0 always recomputes)."""
    if hidden.dim() != 2 or targets.shape != hidden.shape[:1] or weight.shape[1] != hidden.shape[1]:
        raise ValueError(f"head_logprobs: hidden [M, H], weight [V, H], targets [M]; got {tuple(hidden.shape)}, "
                         f"{tuple(weight.shape)}, {tuple(targets.shape)}")
    if is_vocab_parallel(weight):  # a head split by vocabulary over tensor-parallel ranks
        return vocab_parallel_logprobs(hidden, weight, targets, temperature, with_entropy)
    chunk = chunk_tokens(weight.shape[0], hidden.device) if chunk is None else chunk
    if chunk < 1:
        raise ValueError(f"head_logprobs: chunk must be >= 1, got {chunk}")
    if hidden.shape[0] <= chunk:  # one chunk: autograd's own graph is as small and runs the head once
        return _direct(hidden, weight, targets, temperature, with_entropy)
    keep = keep_elements(hidden.device) if keep is None else keep
    # only a backward reads what is kept: scoring without gradients never holds it
    kept = torch.is_grad_enabled() and (hidden.requires_grad or weight.requires_grad) and \
        hidden.shape[0] * weight.shape[0] <= keep
    logp, entropy = _ChunkedHead.apply(hidden, weight, targets, float(temperature), chunk, with_entropy, kept)
    return logp, entropy if with_entropy else None


def _direct(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, temperature: float,
            with_entropy: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    logp_all = torch.log_softmax((hidden @ weight.T).float() / temperature, dim=-1)
    logp = logp_all.gather(-1, targets[:, None]).squeeze(-1)
    return logp, -(logp_all.exp() * logp_all).sum(-1) if with_entropy else None


def _chunk_logits(hidden: torch.Tensor, weight: torch.Tensor, temperature: float,
                  out: torch.Tensor | None = None) -> torch.Tensor:
    """One chunk's logits in fp32, divided by the temperature in place (one [chunk, V] buffer
    when the inputs are fp32), written into `out` when given."""
    if out is not None and hidden.dtype == torch.float32:
        return torch.mm(hidden, weight.T, out=out).div_(temperature)
    z = (hidden @ weight.T).float().div_(temperature)
    return z if out is None else out.copy_(z)


class _ChunkedHead(torch.autograd.Function):
    """(hidden, weight, targets, temperature, chunk, with_entropy, keep) -> (logp [M], entropy
    [M] or empty). Saves the inputs and each token's log-normaliser and entropy, and with `keep`
    the [M, V] log-probabilities (the backward then consumes them in place)."""

    @staticmethod
    def forward(ctx, hidden, weight, targets, temperature, chunk, with_entropy, keep):
        m = hidden.shape[0]
        logp = hidden.new_empty(m, dtype=torch.float32)
        lse = hidden.new_empty(m, dtype=torch.float32)
        entropy = hidden.new_empty(m if with_entropy else 0, dtype=torch.float32)
        kept = hidden.new_empty((m, weight.shape[0]), dtype=torch.float32) if keep else None
        for s in range(0, m, chunk):
            e = min(s + chunk, m)
            z = _chunk_logits(hidden[s:e], weight, temperature, None if kept is None else kept[s:e])
            lse[s:e] = torch.logsumexp(z, dim=-1)
            logp[s:e] = z.gather(-1, targets[s:e, None]).squeeze(-1) - lse[s:e]
            if with_entropy or kept is not None:
                z.sub_(lse[s:e, None])  # now the log-probabilities
            if with_entropy:
                entropy[s:e] = -z.exp().mul_(z).sum(-1)
            del z
        ctx.save_for_backward(hidden, weight, targets, lse, entropy)
        ctx.temperature, ctx.chunk = temperature, chunk
        ctx.kept = kept  # not saved for backward: the backward writes over it, once
        ctx.set_materialize_grads(False)  # an unused output's gradient comes as None: skip its work
        if not with_entropy:
            ctx.mark_non_differentiable(entropy)
        return logp, entropy

    @staticmethod
    def backward(ctx, grad_logp, grad_entropy):
        hidden, weight, targets, lse, entropy = ctx.saved_tensors
        want_h, want_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        kept, ctx.kept = ctx.kept, None  # a second backward (retain_graph) recomputes
        if (grad_logp is None and grad_entropy is None) or not (want_h or want_w):
            return None, None, None, None, None, None, None
        grad_h = hidden.new_empty(hidden.shape) if want_h else None  # contiguous: chunks are written in place
        # accumulated over chunks in fp32: chunk-wise adds in bf16 would lose what one matmul keeps
        grad_w = torch.zeros_like(weight, dtype=torch.float32) if want_w else None
        for s in range(0, hidden.shape[0], ctx.chunk):
            e = min(s + ctx.chunk, hidden.shape[0])
            h = hidden[s:e]
            logp = kept[s:e] if kept is not None else _chunk_logits(h, weight, ctx.temperature).sub_(lse[s:e, None])
            g = _chunk_grad(logp, targets[s:e],
                            None if grad_logp is None else grad_logp[s:e],
                            None if grad_entropy is None else (grad_entropy[s:e], entropy[s:e]))
            g = g.div_(ctx.temperature).to(hidden.dtype)
            if grad_h is not None:
                torch.mm(g, weight, out=grad_h[s:e])
            if grad_w is not None:
                if grad_w.dtype == g.dtype:
                    grad_w.addmm_(g.T, h)
                else:
                    grad_w.add_(g.T @ h)
            del g
        grad_w = grad_w.to(weight.dtype) if grad_w is not None else None
        return grad_h, grad_w, None, None, None, None, None


def _chunk_grad(logp: torch.Tensor, targets: torch.Tensor, grad_logp: torch.Tensor | None,
                grad_entropy: tuple[torch.Tensor, torch.Tensor] | None) -> torch.Tensor:
    """d loss / d (logits / temperature) of one chunk from its log-probabilities, in their buffer
    where it can be.

    With log p = z - lse and H = -sum p log p: d log p_y / dz = onehot(y) - p, and
    dH / dz = -p (log p + H). So the gradient is onehot(y) g - p (g + ge (log p + H))."""
    p = logp.exp()
    if grad_entropy is not None:
        ge, h = grad_entropy
        coef = logp.add_(h[:, None]).mul_(ge[:, None])
        if grad_logp is not None:
            coef.add_(grad_logp[:, None])
        grad = coef.mul_(p).neg_()
    else:
        assert grad_logp is not None
        grad = p.mul_(-grad_logp[:, None])
    if grad_logp is not None:
        grad.scatter_add_(1, targets[:, None], grad_logp[:, None])
    return grad
