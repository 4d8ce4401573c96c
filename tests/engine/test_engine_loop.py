"""The engine loop: chunked prefill, prefix reuse, forks, preemption, stop tokens, finished sequences leaving."""

from dataclasses import replace

import pytest

from engine_helpers import assert_matches_trainer, random_prompts
from tempering.engine import LLM, SamplingParams

SAMPLE = SamplingParams(n=3, temperature=1.0, max_tokens=20, seed=11, ignore_eos=True)
GREEDY = SamplingParams(temperature=0, max_tokens=16, ignore_eos=True)


def tokens(outs):
    return [[c.token_ids for c in o.outputs] for o in outs]


@pytest.mark.parametrize("options", [
    {},
    {"max_batched_tokens": 8, "max_batch_size": 8},  # prompts are prefilled in many chunks
    {"block_size": 4},  # the default is 16
    {"prefix_cache": False},
])
def test_logprobs_equal_the_trainer_under_every_layout(model, options):
    engine = LLM(model, max_seq_len=128, **options)
    prompts = random_prompts(5, 2, 45, seed=1)
    for p, out in zip(prompts, engine.generate(prompts, SAMPLE)):
        for c in out.outputs:
            assert len(c.token_ids) == 20 and c.versions == [0] * 20
            assert_matches_trainer(model, p, c)


def test_samples_of_a_group_share_the_prompt_blocks(model):
    engine = LLM(model, max_seq_len=256)
    prompt = random_prompts(1, 101, 102, seed=2)[0]
    out = engine.generate([prompt], SamplingParams(n=8, temperature=1.0, max_tokens=12, seed=0, ignore_eos=True))[0]
    assert engine.stats["computed_tokens"] == len(prompt)  # the prompt ran once, not 8 times
    assert engine.runner.shared_prefix_reads > 0  # decode read the shared prompt once per group
    assert len({tuple(c.token_ids) for c in out.outputs}) > 1
    for c in out.outputs:
        assert_matches_trainer(model, prompt, c)


def test_prefix_cache_hits_across_requests_and_keeps_outputs_identical(model):
    engine = LLM(model, max_seq_len=256)
    prompts = random_prompts(4, 30, 60, seed=3)
    first = engine.generate(prompts, GREEDY)
    hits = engine.blocks.stats["hit_tokens"]
    second = engine.generate(prompts, GREEDY)
    assert engine.blocks.stats["hit_tokens"] - hits >= sum(len(p) - engine.cfg.block_size for p in prompts)
    assert tokens(first) == tokens(second)
    # A multi-turn follow-up reuses the earlier prompt and the generated reply.
    follow = prompts[0] + first[0].outputs[0].token_ids + [1, 2, 3]
    before = engine.blocks.stats["hit_tokens"]
    out = engine.generate([follow], GREEDY)[0].outputs[0]
    # all but the 3 new tokens, the reply's last (never written to the cache) and a partial block
    assert engine.blocks.stats["hit_tokens"] - before >= len(follow) - 4 - engine.cfg.block_size
    assert_matches_trainer(model, follow, out)


def test_preemption_recomputes_and_changes_nothing(model):
    prompts = random_prompts(8, 20, 40, seed=4)
    roomy = LLM(model, max_seq_len=128)
    tight = LLM(model, max_seq_len=128, block_size=4, kv_blocks=40, max_batch_size=8, max_batched_tokens=64)
    expected = roomy.generate(prompts, GREEDY)
    got = tight.generate(prompts, GREEDY)
    assert tight.scheduler.preemptions > 0
    assert tokens(got) == tokens(expected)
    assert tight.blocks.num_used == 0  # everything released at the end


def test_finished_sequences_leave_the_batch_at_once(model):
    engine = LLM(model, max_seq_len=128)
    prompts = random_prompts(4, 5, 10, seed=5)
    lengths = [2, 5, 9, 30]
    params = [SamplingParams(temperature=0, max_tokens=n, ignore_eos=True) for n in lengths]
    outs = engine.generate(prompts, params)
    assert [len(o.outputs[0].token_ids) for o in outs] == lengths
    # One sampled token per running sequence per step: exactly sum(lengths) were sampled.
    assert engine.stats["generated_tokens"] == sum(lengths)
    assert engine.stats["steps"] == max(lengths)


def test_stop_token_ids_end_a_sequence_even_with_ignore_eos(model):
    engine = LLM(model, max_seq_len=128)
    prompt = random_prompts(1, 10, 11, seed=13)[0]
    first = engine.generate([prompt], GREEDY)[0].outputs[0]
    stop = first.token_ids[5]
    out = engine.generate([prompt], replace(GREEDY, stop_token_ids=(stop,)))[0].outputs[0]
    assert out.token_ids == first.token_ids[: first.token_ids.index(stop) + 1] and out.finish_reason == "stop"


def test_step_api_and_errors(model):
    engine = LLM(model, max_seq_len=64)
    rid = engine.add_request([1, 2, 3], SamplingParams(max_tokens=3, temperature=0, ignore_eos=True))
    done = []
    for _ in range(10):
        done += [o for o in engine.step() if o.finished]
    assert [o.request_id for o in done] == [rid] and not engine.has_unfinished()
    with pytest.raises(ValueError, match="unknown engine options"):
        LLM(model, max_seq_length=3)
    with pytest.raises(ValueError, match="max_batched_tokens"):
        LLM(model, max_batched_tokens=4, max_batch_size=8)
    with pytest.raises(ValueError, match="token ids"):
        engine.generate([[1, 500]])
    with pytest.raises(ValueError, match="tokenizer"):
        engine.generate(["text"])
    with pytest.raises(ValueError, match="kv_blocks"):
        LLM(model, max_seq_len=64, kv_blocks=1).generate([[1, 2, 3]], SamplingParams(max_tokens=20))
    with pytest.raises(ValueError, match="no unfinished request"):
        engine.abort(12345)


def test_forks_that_do_not_fit_the_batch_queue_and_hit_the_prefix_cache(model):
    engine = LLM(model, max_seq_len=128, max_batch_size=4, max_batched_tokens=64)
    prompt = random_prompts(1, 41, 42, seed=12)[0]
    out = engine.generate([prompt], SamplingParams(n=4, temperature=1.0, max_tokens=6, seed=1, ignore_eos=True))[0]
    assert engine.blocks.stats["hit_tokens"] == 0  # all 4 fit: forked, no cache lookups needed
    out = engine.generate([prompt], SamplingParams(n=7, temperature=1.0, max_tokens=6, seed=1, ignore_eos=True))[0]
    assert len(out.outputs) == 7 and engine.blocks.stats["hit_tokens"] >= 40
    for c in out.outputs:
        assert_matches_trainer(model, prompt, c)
