"""Weight loads mid-generation: partial rollouts recompute under the new weights; without them,
requests in flight (forks and preempted sequences included) finish under the old weights first."""

import pytest
import torch
import torch.multiprocessing as tmp

from engine_helpers import ARCH, assert_matches_trainer, finish, random_prompts
from tempering.engine import LLM, SamplingParams
from tempering.engine.sequence import Status
from tempering.models import build_model
from tempering.runtime import Stall
from tempering.weights import EngineSync, WeightStore

CTX = tmp.get_context("spawn")


def models():
    return build_model(ARCH, seed=0).eval(), build_model(ARCH, seed=1).eval()


def synced_engine(partial: bool, **engine_options) -> tuple[LLM, WeightStore, EngineSync]:
    """An engine at version 0 (seed 0's weights) behind a store, as the rollout worker has it."""
    old, _ = models()
    store = WeightStore(old, CTX)
    store.publish(old, 0)
    engine = LLM(build_model(ARCH, seed=2).eval(), max_seq_len=256, version=-1, **engine_options)
    sync = EngineSync(store, engine, partial)
    assert sync.poll() and engine.version == 0
    return engine, store, sync


def test_partial_rollout_continues_as_a_fresh_engine_of_the_new_weights_would():
    engine, store, sync = synced_engine(partial=True)
    old, new = models()
    prompt = random_prompts(1, 30, 31, seed=3)[0]
    greedy = SamplingParams(temperature=0, max_tokens=16, ignore_eos=True)
    engine.add_request(prompt, greedy)
    for _ in range(6):
        engine.step()
    store.publish(new, 1)
    assert sync.poll() and engine.version == 1 and engine.in_flight == 1  # loaded at once, the request kept
    c = finish(engine)[0].outputs[0]
    assert c.versions == [0] * 6 + [1] * 10
    before = LLM(old, max_seq_len=256).generate([prompt], greedy)[0].outputs[0]
    assert c.token_ids[:6] == before.token_ids[:6]
    after = LLM(new, max_seq_len=256).generate([prompt + c.token_ids[:6]],
                                               SamplingParams(temperature=0, max_tokens=10, ignore_eos=True))[0]
    assert c.token_ids[6:] == after.outputs[0].token_ids
    torch.testing.assert_close(torch.tensor(c.logprobs[6:]), torch.tensor(after.outputs[0].logprobs), atol=1e-4, rtol=0)
    assert c.token_ids[6:] != before.token_ids[6:]  # the new weights do change the continuation
    assert sync.stats.syncs == 2 and sync.stats.drain_s == 0.0 and sync.stats.pull_s > 0


def test_without_partial_rollouts_requests_in_flight_finish_under_their_weights_first():
    # Two running sequences at most, 8 tokens a step (the prompt takes 3 steps to prefill and its
    # third sample queues for a place) and KV for less than three (preemption).
    engine, store, sync = synced_engine(partial=False, max_batch_size=2, max_batched_tokens=8, block_size=4, kv_blocks=10)
    old, new = models()
    prompt, late = random_prompts(2, 20, 21, seed=4)
    a = engine.add_request(prompt, SamplingParams(n=3, temperature=1.0, max_tokens=14, seed=5, ignore_eos=True))
    engine.step()  # the first sample starts its prompt: the request is in flight, its forks to come
    store.publish(new, 1)
    assert not sync.poll() and engine.version == 0  # a drain begins
    c = engine.add_request(late, SamplingParams(temperature=0, max_tokens=6, ignore_eos=True))
    done, loaded_at = {}, None
    while engine.has_unfinished():
        was_in_flight = engine.in_flight
        if sync.poll():
            assert loaded_at is None and was_in_flight == 0
            loaded_at = len(done)
        elif loaded_at is None:
            assert was_in_flight > 0  # the load came at the first poll with nothing in flight
            assert all(s.status is Status.WAITING for s in engine.requests[c].seqs)
        done.update({out.request_id: out for out in engine.step() if out.finished})
    assert loaded_at == 1 and engine.version == 1 and sync.stats.syncs == 2
    assert engine.scheduler.preemptions > 0  # a sequence preempted for memory came back under the hold
    assert [len(x.token_ids) for x in done[a].outputs] == [14] * 3
    for x in done[a].outputs:
        assert x.versions == [0] * 14
        assert_matches_trainer(old, prompt, x)
    assert done[c].outputs[0].versions == [1] * 6
    assert_matches_trainer(new, late, done[c].outputs[0])
    assert sync.stats.drain_s > 0 and not sync.draining


def test_a_held_engine_with_nothing_in_flight_waits_for_the_load():
    engine, store, sync = synced_engine(partial=False)
    engine.hold_admission()
    rid = engine.add_request([1, 2, 3], SamplingParams(temperature=0, max_tokens=2, ignore_eos=True))
    assert engine.step() == [] and engine.has_unfinished()  # queued, not admitted, no error
    with pytest.raises(RuntimeError, match="held"):
        engine.generate([[1, 2]], SamplingParams(max_tokens=1))
    store.publish(models()[1], 1)
    assert sync.poll()
    assert finish(engine)[0].request_id == rid


def test_a_drain_past_its_deadline_is_a_stall():
    engine, store, sync = synced_engine(partial=False)
    sync.deadline_s = 0.0
    engine.add_request([1, 2, 3], SamplingParams(temperature=0, max_tokens=8, ignore_eos=True))
    engine.step()
    store.publish(models()[1], 1)
    assert not sync.poll()
    with pytest.raises(Stall, match="engine: 1 sequences still running"):
        sync.poll()
