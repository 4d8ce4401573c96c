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
