"""Chunked token logprobs and entropy: the same values and gradients as one full log-softmax (the
oracle, in float64), through the model's head for tied and untied weights, and a peak memory
that does not grow with the vocabulary beyond the head's own gradient."""

import itertools
import json

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from tempering.buffer import pack
from tempering.models import Arch, build_model
from tempering.records import Trajectory
from tempering.trainer import logprobs, token_logprobs
from tempering.trainer.logprobs import head_logprobs
from tempering.trainer.packing import shared_prompt_layout


def full_oracle(hidden, weight, targets, temperature):
    """The unchunked computation in float64: logprobs [M] and entropy [M]."""
    logp_all = torch.log_softmax(hidden.double() @ weight.double().T / temperature, dim=-1)
    return logp_all.gather(-1, targets[:, None]).squeeze(-1), -(logp_all.exp() * logp_all).sum(-1)


def inputs(m, vocab, hidden=24, seed=0):
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(m, hidden, generator=g).requires_grad_()
    w = (0.5 * torch.randn(vocab, hidden, generator=g)).requires_grad_()
    return h, w, torch.randint(vocab, (m,), generator=g), torch.randn(2, m, generator=g)


@pytest.mark.parametrize("m, chunk, temperature", [(37, 8, 0.7), (37, 1, 1.0), (64, 16, 1.6), (5, 16, 1.3)])
@pytest.mark.parametrize("uses", ["logp", "entropy", "both"])
@pytest.mark.parametrize("keep", [0, 64 * 50], ids=["recomputed", "kept"])
def test_chunked_values_and_gradients_equal_the_full_log_softmax(m, chunk, temperature, uses, keep):
    """37 tokens in chunks of 8 (the last one short) or 1; 64 in 16s; 5 tokens under one chunk.
    The loss weighs the logprobs, the entropy (the entropy bonus) or both. The backward
    recomputes each chunk's logits, or uses the log-probabilities the forward kept."""
    h, w, y, (a, b) = inputs(m, vocab=50)
    logp, entropy = head_logprobs(h, w, y, temperature, chunk, with_entropy=True, keep=keep)
    h64, w64 = h.detach().double().requires_grad_(), w.detach().double().requires_grad_()
    want_logp, want_entropy = full_oracle(h64, w64, y, temperature)
    torch.testing.assert_close(logp, want_logp.float(), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(entropy, want_entropy.float(), atol=1e-5, rtol=1e-5)
    weigh = {"logp": lambda lp, e: (lp * a).sum(), "entropy": lambda lp, e: (e * b).sum(),
             "both": lambda lp, e: (lp * a).sum() + (e * b).sum()}[uses]
    weigh(logp, entropy).backward()
    weigh(want_logp, want_entropy).backward()
    torch.testing.assert_close(h.grad, h64.grad.float(), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(w.grad, w64.grad.float(), atol=1e-5, rtol=1e-5)


def _backward_logits(keep: int, m: int = 40, chunk: int = 8) -> int:
    """How many chunk logits ([chunk, H] x [H, V] products) the backward of one call computes."""
    h, w, y, (a, _) = inputs(m, vocab=50)
    logp, _ = head_logprobs(h, w, y, 0.7, chunk, keep=keep)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        (logp * a).sum().backward()
    return sum(e.count for e in prof.key_averages(group_by_input_shape=True)
               if e.key == "aten::mm" and e.input_shapes[:2] == [[chunk, 24], [24, 50]])


def test_kept_log_probabilities_spare_the_backward_the_heads_recompute():
    """40 tokens in 5 chunks: recomputing, the backward computes each chunk's logits again (one
    [8, 24] x [24, 50] product a chunk); keeping, never. At the budget it keeps; one element
    under, it recomputes."""
    assert _backward_logits(keep=0) == 5
    assert _backward_logits(keep=40 * 50) == 0
    assert _backward_logits(keep=40 * 50 - 1) == 5


def test_a_second_backward_through_kept_log_probabilities_recomputes_them():
    """The backward writes over what the forward kept; a retained graph's second backward
    recomputes and gives the same gradients again."""
    h, w, y, (a, b) = inputs(37, vocab=50)
    logp, entropy = head_logprobs(h, w, y, 0.7, 8, with_entropy=True, keep=37 * 50)
    loss = (logp * a).sum() + (entropy * b).sum()
    loss.backward(retain_graph=True)
    first = h.grad.clone(), w.grad.clone()
    h.grad, w.grad = None, None
    loss.backward()
    torch.testing.assert_close(h.grad, first[0], atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(w.grad, first[1], atol=1e-6, rtol=1e-6)


def test_without_entropy_and_without_gradients():
    h, w, y, _ = inputs(37, vocab=50)
    with torch.no_grad():
        logp, entropy = head_logprobs(h, w, y, 0.7, chunk=8)
    assert entropy is None and not logp.requires_grad
    torch.testing.assert_close(logp, full_oracle(h, w, y, 0.7)[0].float(), atol=1e-5, rtol=1e-5)


def test_bf16_matches_the_full_pass_in_bf16():
    """Logits in the inputs' dtype then fp32, as `Decoder.forward`; the head weight's gradient
    is summed over chunks in fp32 and comes back in bf16."""
    h, w, y, (a, b) = inputs(37, vocab=50)
    h, w = h.detach().bfloat16().requires_grad_(), w.detach().bfloat16().requires_grad_()
    logp, entropy = head_logprobs(h, w, y, 0.7, chunk=8, with_entropy=True)
    ((logp * a).sum() + (entropy * b).sum()).backward()
    h2, w2 = h.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    logp_all = torch.log_softmax((h2 @ w2.T).float() / 0.7, dim=-1)
    want_logp, want_entropy = logp_all.gather(-1, y[:, None]).squeeze(-1), -(logp_all.exp() * logp_all).sum(-1)
    ((want_logp * a).sum() + (want_entropy * b).sum()).backward()
    torch.testing.assert_close(logp, want_logp, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(entropy, want_entropy, atol=1e-5, rtol=1e-5)
    assert h.grad.dtype == w.grad.dtype == torch.bfloat16
    torch.testing.assert_close(h.grad, h2.grad, atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(w.grad, w2.grad, atol=2e-2, rtol=2e-2)


def sample(prompt, completion, group):
    t = Trajectory(task_id="t", domain="d", sample_index=0, prompt_ids=prompt, token_ids=completion,
                   logprobs=[0.0] * len(completion), loss_mask=[1] * len(completion),
                   versions=[0] * len(completion), text="", finish_reason="stop")
    return t, 0.0, group


@pytest.mark.parametrize("tied", [False, True])
def test_trainer_paths_in_small_chunks_equal_the_models_full_logits(monkeypatch, tied):
    """`token_logprobs` and the shared-prompt `Layout`, with chunks of 3 tokens, against
    log-softmax of `Decoder.forward`'s logits: values, entropy and every parameter's gradient
    (a tied head's gradient adds to the embedding's)."""
    arch = Arch(vocab_size=20, hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, tie_word_embeddings=tied)
    monkeypatch.setattr(logprobs, "CPU_CHUNK_ELEMENTS", 3 * arch.vocab_size)
    b = pack([sample([1, 5, 6, 7], [8, 9, 10, 2], 0), sample([1, 5, 6, 7], [11, 2], 0),
              sample([1, 4, 4], [3, 3, 12, 2], 1)], pad_id=0, version=0)
    width = int(b.seq_lens.max())
    real = torch.arange(width - 1)[None, :] < (b.seq_lens[:, None] - 1)
    weights = real * torch.linspace(0.5, 2.0, width - 1)
    oracle = build_model(arch, seed=5)
    logp_all = torch.log_softmax(oracle(b.input_ids[:, :-1]).double() / 0.7, dim=-1)
    want_logp = logp_all.gather(-1, b.input_ids[:, 1:, None]).squeeze(-1)
    want_entropy = -(logp_all.exp() * logp_all).sum(-1)
    ((want_logp * weights).sum() - 0.1 * (want_entropy * weights).sum()).backward()
    for run in (lambda m: token_logprobs(m, b.input_ids, 0.7, with_entropy=True),
                lambda m: shared_prompt_layout(b, torch.arange(3), width).logprobs(m, 0.7, with_entropy=True)):
        model = build_model(arch, seed=5)
        logp, entropy = run(model)
        torch.testing.assert_close(logp[real], want_logp[real].float(), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(entropy[real], want_entropy[real].float(), atol=1e-5, rtol=1e-5)
        ((logp * weights).sum() - 0.1 * (entropy * weights).sum()).backward()
        for (name, p), q in zip(model.named_parameters(), oracle.parameters()):
            torch.testing.assert_close(p.grad, q.grad.float(), atol=1e-5, rtol=1e-4, msg=name)


def net_peak_bytes(fn, trace_path) -> int:
    """The most CPU memory that `fn` held at once beyond what existed before it: every
    allocation and free that the profiler saw, summed in order. Exact byte counts, not RSS."""
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    prof.export_chrome_trace(str(trace_path))
    events = [e for e in json.loads(trace_path.read_text())["traceEvents"]
              if e.get("name") == "[memory]" and e["args"].get("Device Type") == 0]
    assert events, "the profiler recorded no CPU memory events"
    events.sort(key=lambda e: e["ts"])
    return max(itertools.accumulate(e["args"]["Bytes"] for e in events))


def test_peak_memory_stays_flat_as_the_vocabulary_grows(tmp_path):
    """Forward and backward of logprobs and entropy for 300 tokens, hidden 64, chunks of about
    2M logits: beyond the head weight's own gradient ([V, H], which any method holds) the peak
    is a few chunks at 30k and at 150k alike, and far below one [300, V] fp32 tensor (nothing
    kept: the forward keeps its log-probabilities only when asked to, by a budget)."""
    m, hidden, elements = 300, 64, 1 << 21
    excess = {}
    for vocab in (30_000, 150_000):
        h, w, y, (a, b) = inputs(m, vocab, hidden)
        chunk = elements // vocab

        def step():
            logp, entropy = head_logprobs(h, w, y, 1.3, chunk, with_entropy=True, keep=0)
            ((logp * a).sum() + (entropy * b).sum()).backward()

        peak = net_peak_bytes(step, tmp_path / f"{vocab}.json")
        assert w.grad is not None and h.grad is not None
        excess[vocab] = peak - w.numel() * 4
        assert excess[vocab] < 4 * elements * 4, (vocab, excess[vocab])  # a few chunk-sized buffers
    assert excess[150_000] < 1.5 * excess[30_000], excess
    assert excess[150_000] < m * 150_000 * 4 / 8  # one full [300, 150k] fp32 tensor is 180 MB
