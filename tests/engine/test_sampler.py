"""The sampler: logprobs of the temperature-scaled distribution before truncation, top-k and
top-p keep what they say, greedy rows take the argmax, draws follow the distribution."""

import torch

from tempering.engine.sampler import sample

LOGITS = torch.log(torch.tensor([0.05, 0.5, 0.15, 0.3]))  # token 1, then 3, then 2, then 0


def draw(rows: int, temperature=1.0, top_p=1.0, top_k=0, logits=LOGITS):
    torch.manual_seed(0)
    return sample(logits.expand(rows, -1).contiguous(), torch.full((rows,), temperature),
                  torch.full((rows,), top_p), torch.full((rows,), top_k, dtype=torch.long), [None] * rows)


def frequencies(tokens: torch.Tensor) -> list[float]:
    return (torch.bincount(tokens, minlength=len(LOGITS)) / len(tokens)).tolist()


def test_logprobs_are_of_the_temperature_scaled_distribution_before_top_p_and_top_k():
    tokens, logprobs = draw(64, temperature=0.7, top_p=0.6, top_k=2)
    expected = torch.log_softmax(LOGITS / 0.7, -1)[tokens]
    torch.testing.assert_close(logprobs, expected)


def test_untruncated_draws_follow_the_distribution():
    freq = frequencies(draw(20_000)[0])
    assert all(abs(f - p) < 0.02 for f, p in zip(freq, LOGITS.exp().tolist()))


def test_top_k_keeps_the_k_likeliest_tokens():
    assert set(draw(2_000, top_k=2)[0].tolist()) == {1, 3}
    assert set(draw(200, top_k=1)[0].tolist()) == {1}


def test_top_p_keeps_the_smallest_head_reaching_p_renormalised():
    freq = frequencies(draw(20_000, top_p=0.75)[0])  # 0.5 + 0.3 reaches 0.75: tokens 1 and 3
    assert freq[0] == freq[2] == 0 and abs(freq[1] - 0.5 / 0.8) < 0.02
    assert set(draw(200, top_p=0.4)[0].tolist()) == {1}


def test_greedy_rows_take_the_argmax_next_to_sampled_rows():
    logits = torch.randn(6, 50)
    temperature = torch.tensor([0.0, 1.0, 0.0, 1.0, 0.0, 1.0])
    tokens, logprobs = sample(logits, temperature, torch.ones(6), torch.zeros(6, dtype=torch.long), [None] * 6)
    greedy = temperature == 0
    assert torch.equal(tokens[greedy], logits.argmax(-1)[greedy])
    scaled = torch.where(greedy[:, None], logits, logits / temperature[:, None])
    torch.testing.assert_close(logprobs, torch.log_softmax(scaled, -1).gather(1, tokens[:, None]).squeeze(1))


def test_draws_over_many_chunks_and_a_partial_last_one_follow_the_distribution():
    vocab = 1000  # 7 chunks of 128 tokens and one of 104
    probs = torch.zeros(vocab)
    probs[[3, 130, 511, 900, 999]] = torch.tensor([0.1, 0.2, 0.3, 0.15, 0.25])
    tokens, logprobs = draw(20_000, logits=probs.log())
    freq = torch.bincount(tokens, minlength=vocab) / len(tokens)
    assert set(tokens.tolist()) == {3, 130, 511, 900, 999}  # never a token of probability zero
    assert all(abs(freq[t] - probs[t]) < 0.02 for t in (3, 130, 511, 900, 999))
    torch.testing.assert_close(logprobs, probs.log()[tokens])


def test_a_seeded_row_draws_the_same_token_whatever_else_is_in_the_batch():
    logits = torch.randn(5, 700)
    ones, zeros = torch.ones(5), torch.zeros(5, dtype=torch.long)
    alone = [sample(logits[i:i + 1], ones[:1], ones[:1], zeros[:1], [torch.Generator().manual_seed(7)])[0]
             for i in range(5)]
    together = sample(logits, ones, ones, zeros, [torch.Generator().manual_seed(7) for _ in range(5)])[0]
    assert together.tolist() == [int(t) for t in alone]


def test_each_draw_is_the_inverse_cdf_of_its_seeded_uniform():
    """Oracle: the token where the row's float64 cumulative mass first exceeds u times its total."""
    logits = torch.randn(32, 1000) * 4
    ones, zeros = torch.ones(32), torch.zeros(32, dtype=torch.long)
    tokens, _ = sample(logits, ones, ones, zeros, [torch.Generator().manual_seed(i) for i in range(32)])
    cdf = torch.softmax(logits, -1).double().cumsum(-1)
    u = torch.tensor([torch.rand((), dtype=torch.float64, generator=torch.Generator().manual_seed(i)) for i in range(32)])
    expected = torch.searchsorted(cdf, (u * cdf[:, -1])[:, None], right=True).squeeze(1)
    assert tokens.tolist() == expected.tolist()
