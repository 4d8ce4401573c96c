"""`step()`'s contract (vLLM's): outputs of unfinished requests too, cumulative, finished once."""

import pytest

from engine_helpers import random_prompts
from tempering.engine import LLM, SamplingParams


def test_step_returns_cumulative_outputs_of_running_requests_and_finished_exactly_once(model):
    engine = LLM(model, max_seq_len=128, max_batched_tokens=16, max_batch_size=8)
    prompt = random_prompts(1, 40, 41, seed=15)[0]  # 40 tokens in chunks of 16: 3 steps to the first token
    params = SamplingParams(n=3, temperature=1.0, max_tokens=12, seed=5, ignore_eos=True)
    rid = engine.add_request(prompt, params)
    per_step = []
    while engine.has_unfinished():
        per_step.append(engine.step())
    assert per_step[:2] == [[], []]  # prefill chunks sample nothing, so they report nothing
    outs = [step[0] for step in per_step[2:]]
    assert all(len(step) == 1 for step in per_step[2:]) and all(o.request_id == rid for o in outs)
    assert [o.finished for o in outs] == [False] * 11 + [True]
    final = outs[-1]
    for k, out in enumerate(outs, start=1):
        for c, last in zip(out.outputs, final.outputs):
            assert len(c.token_ids) == len(c.logprobs) == len(c.versions) == k
            assert c.token_ids == last.token_ids[:k] and c.logprobs == last.logprobs[:k]
            assert c.versions == last.versions[:k]
            if k < 12:
                assert c.finish_reason is None and not c.finished() and c.text == ""
    assert all(c.finish_reason == "length" for c in final.outputs)
    assert len(outs[0].outputs[0].token_ids) == 1  # an output handed out earlier did not grow since
    assert engine.step() == [] and not engine.has_unfinished()
    # generate (finished outputs only) gives the same samples
    again = LLM(model, max_seq_len=128, max_batched_tokens=16, max_batch_size=8).generate([prompt], params)[0]
    assert [c.token_ids for c in again.outputs] == [c.token_ids for c in final.outputs]
    assert [c.logprobs for c in again.outputs] == [c.logprobs for c in final.outputs]


def test_a_sample_that_stops_early_reports_its_finish_while_its_request_runs(model):
    prompt = random_prompts(1, 10, 11, seed=16)[0]
    params = SamplingParams(n=2, temperature=1.0, max_tokens=16, seed=9, ignore_eos=True)
    a, b = (c.token_ids for c in LLM(model, max_seq_len=64).generate([prompt], params)[0].outputs)
    # a token sample 0 draws at step 3 (first time) that sample 1 never draws: only sample 0 stops
    stop = next(t for i, t in enumerate(a) if i >= 2 and t not in a[:i] and t not in b)
    engine = LLM(model, max_seq_len=64)
    engine.add_request(prompt, SamplingParams(n=2, temperature=1.0, max_tokens=16, seed=9, ignore_eos=True,
                                              stop_token_ids=(stop,)))
    outs = []
    while engine.has_unfinished():
        outs += engine.step()
    cut = a.index(stop) + 1
    early = [o for o in outs if o.outputs[0].finish_reason == "stop"]
    assert not early[0].finished and len(early[0].outputs[0].token_ids) == cut
    assert all(o.outputs[0].token_ids == a[:cut] for o in early)  # it stays as it finished
    assert [o.finished for o in outs].count(True) == 1 and outs[-1].finished
    assert outs[-1].outputs[1].token_ids == b and outs[-1].outputs[1].finish_reason == "length"


def test_abort_returns_what_the_last_step_reported(model):
    engine = LLM(model, max_seq_len=64)
    rid = engine.add_request([1, 2, 3], SamplingParams(n=2, temperature=1.0, max_tokens=20, seed=3, ignore_eos=True))
    for _ in range(4):
        last = engine.step()[0]
    partial = engine.abort(rid)
    assert partial.finished and [c.token_ids for c in partial.outputs] == [c.token_ids for c in last.outputs]
    assert all(c.finish_reason == "abort" and len(c.token_ids) == 4 for c in partial.outputs)
    assert engine.step() == []
    with pytest.raises(ValueError, match="no unfinished request"):
        engine.abort(rid)
