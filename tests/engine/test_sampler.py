"""The sampler: logprobs of the temperature-scaled distribution before truncation, top-k and
top-p keep what they say, greedy rows take the argmax, draws follow the distribution. Every test
runs on both paths: sampler.c's (untruncated float32 rows on the CPU) and PyTorch's."""

import functools

import pytest
import torch

from engine_helpers import built_with, torch_threads
from tempering.engine import sampler
from tempering.engine.cpu import sampler as cpu_sampler


@pytest.fixture(params=["native", "torch"])
def path(request):
    if request.param == "native" and not cpu_sampler.built():
        pytest.skip("no C compiler built sampler.c")
    return request.param


@pytest.fixture
def sample(path):
    """`sampler.sample` on the path under test."""
    return functools.partial(sampler.sample, native=path == "native")

LOGITS = torch.log(torch.tensor([0.05, 0.5, 0.15, 0.3]))  # token 1, then 3, then 2, then 0


def draw(sample, rows: int, temperature=1.0, top_p=1.0, top_k=0, logits=LOGITS):
    torch.manual_seed(0)
    return sample(logits.expand(rows, -1).contiguous(), torch.full((rows,), temperature),
                  torch.full((rows,), top_p), torch.full((rows,), top_k, dtype=torch.long), [None] * rows)


def frequencies(tokens: torch.Tensor) -> list[float]:
    return (torch.bincount(tokens, minlength=len(LOGITS)) / len(tokens)).tolist()


def test_logprobs_are_of_the_temperature_scaled_distribution_before_top_p_and_top_k(sample):
    tokens, logprobs = draw(sample, 64, temperature=0.7, top_p=0.6, top_k=2)
    expected = torch.log_softmax(LOGITS / 0.7, -1)[tokens]
    torch.testing.assert_close(logprobs, expected)


def test_untruncated_draws_follow_the_distribution(sample):
    freq = frequencies(draw(sample, 20_000)[0])
    assert all(abs(f - p) < 0.02 for f, p in zip(freq, LOGITS.exp().tolist()))


def test_top_k_keeps_the_k_likeliest_tokens(sample):
    assert set(draw(sample, 2_000, top_k=2)[0].tolist()) == {1, 3}
    assert set(draw(sample, 200, top_k=1)[0].tolist()) == {1}


def test_top_p_keeps_the_smallest_head_reaching_p_renormalised(sample):
    freq = frequencies(draw(sample, 20_000, top_p=0.75)[0])  # 0.5 + 0.3 reaches 0.75: tokens 1 and 3
    assert freq[0] == freq[2] == 0 and abs(freq[1] - 0.5 / 0.8) < 0.02
    assert set(draw(sample, 200, top_p=0.4)[0].tolist()) == {1}


def test_greedy_rows_take_the_argmax_next_to_sampled_rows(sample):
    logits = torch.randn(64, 50)
    temperature = torch.tensor([0.0, 1.0] * 32)
    tokens, logprobs = sample(logits, temperature, torch.ones(64), torch.zeros(64, dtype=torch.long), [None] * 64)
    greedy = temperature == 0
    assert torch.equal(tokens[greedy], logits.argmax(-1)[greedy])
    scaled = torch.where(greedy[:, None], logits, logits / temperature[:, None])
    torch.testing.assert_close(logprobs, torch.log_softmax(scaled, -1).gather(1, tokens[:, None]).squeeze(1))


def test_draws_over_many_chunks_and_a_partial_last_one_follow_the_distribution(sample):
    vocab = 1000  # 7 chunks of 128 tokens and one of 104
    probs = torch.zeros(vocab)
    probs[[3, 130, 511, 900, 999]] = torch.tensor([0.1, 0.2, 0.3, 0.15, 0.25])
    tokens, logprobs = draw(sample, 20_000, logits=probs.log())
    freq = torch.bincount(tokens, minlength=vocab) / len(tokens)
    assert set(tokens.tolist()) == {3, 130, 511, 900, 999}  # never a token of probability zero
    assert all(abs(freq[t] - probs[t]) < 0.02 for t in (3, 130, 511, 900, 999))
    torch.testing.assert_close(logprobs, probs.log()[tokens])


def test_a_seeded_row_draws_the_same_token_whatever_else_is_in_the_batch(sample):
    logits = torch.randn(5, 700)
    ones, zeros = torch.ones(5), torch.zeros(5, dtype=torch.long)
    alone = [sample(logits[i:i + 1], ones[:1], ones[:1], zeros[:1], [torch.Generator().manual_seed(7)])[0]
             for i in range(5)]
    together = sample(logits, ones, ones, zeros, [torch.Generator().manual_seed(7) for _ in range(5)])[0]
    assert together.tolist() == [int(t) for t in alone]


def test_each_draw_is_the_inverse_cdf_of_its_seeded_uniform(sample):
    """Oracle: the token where the row's float64 cumulative mass first exceeds u times its total."""
    logits = torch.randn(32, 1000) * 4
    ones, zeros = torch.ones(32), torch.zeros(32, dtype=torch.long)
    tokens, _ = sample(logits, ones, ones, zeros, [torch.Generator().manual_seed(i) for i in range(32)])
    cdf = torch.softmax(logits, -1).double().cumsum(-1)
    u = torch.tensor([torch.rand((), dtype=torch.float64, generator=torch.Generator().manual_seed(i)) for i in range(32)])
    expected = torch.searchsorted(cdf, (u * cdf[:, -1])[:, None], right=True).squeeze(1)
    assert tokens.tolist() == expected.tolist()


def test_untruncated_rows_at_a_temperature_have_its_logprobs(sample):
    logits = torch.randn(9, 300) * 3
    t = torch.tensor([0.5, 0.7, 1.0, 1.3, 2.0, 0.0, 0.9, 1.0, 0.25])
    tokens, logprobs = sample(logits, t, torch.ones(9), torch.zeros(9, dtype=torch.long), [None] * 9)
    scaled = logits / torch.where(t == 0, torch.ones_like(t), t)[:, None]
    torch.testing.assert_close(logprobs, torch.log_softmax(scaled, -1).gather(1, tokens[:, None]).squeeze(1))
    assert tokens[5] == logits[5].argmax()


def test_both_paths_draw_the_same_tokens_from_the_same_seeds():
    """The C kernel against the PyTorch path at a real vocabulary size (16k, and one not a
    multiple of the chunk or vector width), seeded rows: the same tokens, logprobs to float32
    rounding."""
    if not cpu_sampler.built():
        pytest.skip("no C compiler built sampler.c")
    for vocab in (16384, 50_257):
        logits = torch.randn(16, vocab) * torch.tensor([3.0] * 12 + [30.0] * 4)[:, None]  # peaked rows too
        logits[3, ::2] = -torch.inf  # a masked vocabulary
        args = (torch.ones(16), torch.ones(16), torch.zeros(16, dtype=torch.long))
        runs = []
        for native in (True, False):
            runs.append(sampler.sample(logits, *args, [torch.Generator().manual_seed(i) for i in range(16)],
                                       native=native))
        assert runs[0][0].tolist() == runs[1][0].tolist()
        assert bool((runs[0][0][3] % 2 == 1))
        torch.testing.assert_close(runs[0][1], runs[1][1], atol=2e-5, rtol=0)


def test_a_row_without_a_finite_largest_logit_is_an_error_naming_it(sample):
    """NaN or +inf logits, or a row of -inf, are a broken model's: no distribution to draw from,
    on either path."""
    args = (torch.ones(3), torch.ones(3), torch.zeros(3, dtype=torch.long), [None] * 3)
    for bad in (float("nan"), float("inf")):
        logits = torch.randn(3, 40)
        logits[1, 7] = bad
        with pytest.raises(ValueError, match="logits of row 1 .of 3. have no finite largest"):
            sample(logits, *args)
    logits = torch.randn(3, 40)
    logits[2] = -torch.inf
    with pytest.raises(ValueError, match="logits of row 2 "):
        sample(logits, *args)



@pytest.mark.parametrize("width", [8, 16])
def test_both_vector_widths_draw_as_the_torch_path(width, path, tmp_path, monkeypatch):
    """sampler.c built with 8- and 16-float vectors forced (-DW; the machine picks one) draws
    the tokens the PyTorch path draws, at vocabularies shorter than a vector and not a multiple
    of one."""
    if path == "torch":
        pytest.skip("builds the C kernel")
    with built_with([cpu_sampler._kernel], f"-DW={width}", tmp_path, monkeypatch):
        assert cpu_sampler._kernel() is not None
        for vocab in (5, 17, 1000, 16391):
            logits = torch.randn(8, vocab) * 4
            t = torch.tensor([1.0, 0.0, 0.5, 1.0, 2.0, 1.0, 0.0, 1.0])
            args = (t, torch.ones(8), torch.zeros(8, dtype=torch.long))
            runs = []
            for native in (True, False):
                runs.append(sampler.sample(logits, *args, [torch.Generator().manual_seed(i) for i in range(8)],
                                           native=native))
            assert runs[0][0].tolist() == runs[1][0].tolist()
            torch.testing.assert_close(runs[0][1], runs[1][1], atol=2e-5, rtol=0)


def test_runs_of_rows_on_threads_draw_what_one_thread_draws(sample, path, monkeypatch):
    """With more torch threads the C kernel's rows are split into runs on that many threads:
    every row drawn, the same tokens and logprobs as on one thread; an empty batch is no run."""
    if path == "torch":
        pytest.skip("the C kernel's split")
    logits, t = torch.randn(13, 300) * 3, torch.linspace(0.5, 2.0, 13).index_fill(0, torch.tensor([2, 9]), 0.0)
    args = (torch.ones(13), torch.zeros(13, dtype=torch.long))
    gens = lambda: [torch.Generator().manual_seed(i) for i in range(13)]  # noqa: E731
    one = sample(logits, t, *args, gens())
    kernel, runs = cpu_sampler._kernel(), []

    def recorded(*a):
        runs.append(a[1])  # the run's rows
        return kernel(*a)

    monkeypatch.setattr(cpu_sampler, "_kernel", lambda: recorded)
    monkeypatch.setattr(cpu_sampler, "SPLIT_ELEMENTS", 1)
    with torch_threads(3):
        many = sample(logits, t, *args, gens())
        empty = sample(torch.empty(0, 300), torch.empty(0), torch.empty(0), torch.empty(0, dtype=torch.long), [])
    assert sorted(runs) == [0, 4, 4, 5]  # 13 rows in 3 runs, then the empty batch
    assert torch.equal(one[0], many[0]) and torch.equal(one[1], many[1])
    assert empty[0].shape == (0,) and empty[1].shape == (0,)
