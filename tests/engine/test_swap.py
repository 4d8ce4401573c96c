"""Preemption by swap: a preempted sequence's KV goes to the host swap space and comes back, so
the run equals an uninterrupted one; a full swap space, shared blocks and new weights fall back
to recompute; the swap space copies every tensor the pool keeps."""

import pytest
import torch

from engine_helpers import random_prompts
from tempering.config import EngineConfig
from tempering.engine import LLM, SamplingParams
from tempering.engine.block_manager import BlockManager
from tempering.engine.kv_cache import KVPool
from tempering.engine.kv_swap import SwapSpace
from tempering.engine.scheduler import Scheduler
from tempering.engine.sequence import Sequence, Status

GREEDY = SamplingParams(temperature=0, max_tokens=16, ignore_eos=True)
# a seed per request (the engine's generators are per sequence): preemption must not change draws
SEEDED = [SamplingParams(temperature=1.0, max_tokens=16, ignore_eos=True, seed=i) for i in range(8)]
# Too few blocks for 8 sequences: decodes preempt. Each prompt is prefilled in one chunk, as in
# the uninterrupted run: int8 KV and sparse attention give slightly different logprobs for other
# chunkings (and for a recompute, which prefills prompt and output in one chunk).
TIGHT = {"max_seq_len": 128, "block_size": 4, "kv_blocks": 40, "max_batch_size": 8, "max_batched_tokens": 512}


def run(model, prompts, params, **options):
    engine = LLM(model, **options)
    return engine, engine.generate(prompts, params)


def assert_same(got, expected):
    for a, b in zip(got, expected):
        for x, y in zip(a.outputs, b.outputs):
            assert x.token_ids == y.token_ids
            torch.testing.assert_close(torch.tensor(x.logprobs), torch.tensor(y.logprobs), atol=1e-5, rtol=0)


def assert_all_returned(engine):
    assert engine.blocks.num_used == 0 and not engine.scheduler.swapped
    swap = engine.scheduler.swap
    assert swap is None or swap.num_free == swap.num_blocks


@pytest.mark.parametrize("params", [GREEDY, SEEDED], ids=["greedy", "seeded"])
@pytest.mark.parametrize("options", [{}, {"kv_dtype": "int8"}, {"sparse_topk": 2, "sparse_local_blocks": 1}],
                         ids=["fp32", "int8", "sparse"])
def test_swap_equals_an_uninterrupted_run(model, params, options):
    prompts = random_prompts(8, 20, 40, seed=4)
    # room for all: never preempted (blocks as TIGHT's: sparse attention selects whole blocks)
    _, expected = run(model, prompts, params, max_seq_len=128, block_size=TIGHT["block_size"], **options)
    recompute, _ = run(model, prompts, params, **TIGHT, **options)
    swapped, got = run(model, prompts, params, **TIGHT, **options, swap_blocks=200)
    s = swapped.scheduler
    assert s.swaps_out > 0 and s.swaps_in == s.swaps_out
    assert s.preemptions < recompute.scheduler.preemptions
    assert swapped.stats["computed_tokens"] < recompute.stats["computed_tokens"]  # no prefix ran twice
    assert_same(got, expected)
    assert_all_returned(swapped)


def test_preempted_mid_prefill_resumes_from_its_swapped_chunks(model, monkeypatch):
    prompts = random_prompts(6, 60, 90, seed=8)
    options = {"max_seq_len": 128, "block_size": 4, "kv_blocks": 60, "max_batch_size": 6, "max_batched_tokens": 24}
    _, expected = run(model, prompts, GREEDY, max_seq_len=128)
    mid_prefill = []
    swap_out = Scheduler._swap_out

    def recording(self, seq):
        mid_prefill.append(seq.num_computed < seq.num_prompt)
        return swap_out(self, seq)
    monkeypatch.setattr(Scheduler, "_swap_out", recording)
    engine, got = run(model, prompts, GREEDY, **options, swap_blocks=400)
    assert engine.scheduler.swaps_out > 0 and engine.scheduler.preemptions == 0 and any(mid_prefill)
    assert_same(got, expected)
    assert_all_returned(engine)


def test_a_full_swap_space_falls_back_to_recompute(model):
    prompts = random_prompts(8, 20, 40, seed=4)
    _, expected = run(model, prompts, GREEDY, max_seq_len=128)
    engine, got = run(model, prompts, GREEDY, **TIGHT, swap_blocks=12)  # one or two sequences' worth
    s = engine.scheduler
    assert s.swaps_out > 0 and s.preemptions > 0  # some swapped, the rest recomputed
    assert_same(got, expected)
    assert_all_returned(engine)


def test_groups_sharing_blocks_are_recomputed_and_still_match(model):
    prompts = random_prompts(4, 20, 40, seed=6)
    params = SamplingParams(n=3, temperature=1.0, max_tokens=16, ignore_eos=True, seed=3)
    _, expected = run(model, prompts, params, max_seq_len=128)
    engine, got = run(model, prompts, params, **TIGHT, swap_blocks=200)
    assert engine.scheduler.preemptions > 0  # forks share their prompt blocks: not swapped
    assert_same(got, expected)
    assert_all_returned(engine)


def test_shared_blocks_are_never_swapped():
    bm = BlockManager(num_blocks=6, block_size=4)
    swap = SwapSpace(KVPool(1, 6, 4, 1, 2), 16)
    sched = Scheduler(bm, max_batch_size=8, max_batched_tokens=64, swap=swap)
    parent, *children = [Sequence(0, i, list(range(7)), 7, SamplingParams(n=3)) for i in range(3)]
    sched.add(parent, forks=children)
    out = sched.schedule(version=0)
    sched.update(out, version=0)
    shared = parent.block_table[0]
    for seq in (parent, *children):
        seq.tokens += [1, 2, 3, 4]  # each needs a third block; two are free: the newest is preempted
    sched.schedule(version=0)
    assert children[1].status is Status.WAITING and sched.preemptions == 1 and sched.swaps_out == 0
    assert bm.ref[shared] == 2 and swap.num_free == 16


def test_swapped_sequences_resume_before_new_ones_are_admitted():
    bm = BlockManager(num_blocks=4, block_size=4)
    swap = SwapSpace(KVPool(1, 4, 4, 1, 2), 8)
    sched = Scheduler(bm, max_batch_size=8, max_batched_tokens=64, swap=swap)
    a, b = [Sequence(i, 0, list(range(8)), 8, SamplingParams()) for i in range(2)]
    sched.add(a)
    sched.add(b)
    sched.update(sched.schedule(version=0), version=0)  # both hold 2 blocks: the pool is full
    a.tokens.append(1)
    b.tokens.append(1)
    new = Sequence(2, 0, [1, 2, 3], 3, SamplingParams())
    sched.add(new)
    out = sched.schedule(version=0)  # a needs a third block: b, the newest, is swapped out
    assert out.items == [(a, 1)] and b.status is Status.SWAPPED and sched.swaps_out == 1
    assert new.status is Status.WAITING  # one block is free, but b is first in line for it
    sched.update(out, version=0)
    sched.finish(a)
    out = sched.schedule(version=0)
    assert out.items == [(b, 1), (new, 3)] and sched.swaps_in == 1 and sched.preemptions == 0
    assert len(b.block_table) == 3 and swap.num_free == 8


def test_new_weights_drop_swapped_kv_and_abort_frees_it(model):
    prompts = random_prompts(8, 20, 40, seed=4)
    _, expected = run(model, prompts, GREEDY, max_seq_len=128)
    engine = LLM(model, **TIGHT, swap_blocks=200)
    rids = [engine.add_request(p, GREEDY) for p in prompts]
    for _ in range(200):  # the pool is tight: a swap comes within a few steps
        if engine.scheduler.swapped:
            break
        engine.step()
    assert engine.scheduler.swapped
    swap = engine.scheduler.swap
    assert swap.num_free < swap.num_blocks
    engine.load_weights(model.state_dict(), version=1)  # same weights, new version: KV is stale
    assert not engine.scheduler.swapped and swap.num_free == swap.num_blocks
    done = {}
    while engine.has_unfinished():
        done.update((o.request_id, o) for o in engine.step() if o.finished)
    assert [done[r].outputs[0].token_ids for r in rids] == [o.outputs[0].token_ids for o in expected]
    # abort while swapped: its swap blocks come back
    engine.scheduler.preemptions = 0
    rids = [engine.add_request(p, GREEDY) for p in prompts]
    for _ in range(200):  # the pool is tight: a swap comes within a few steps
        if engine.scheduler.swapped:
            break
        engine.step()
    assert engine.scheduler.swapped
    victim = engine.scheduler.swapped[0]
    engine.abort(victim.request_id)
    assert victim.status is Status.FINISHED and not victim.swap_table
    while engine.has_unfinished():
        engine.step()
    assert_all_returned(engine)


@pytest.mark.parametrize("kv", [{}, {"dtype": "int8", "summaries": True}], ids=["fp32", "int8 + summaries"])
def test_swap_space_round_trips_every_pool_tensor(kv):
    pool = KVPool(2, 8, 4, 2, 8, **kv)
    g = torch.Generator().manual_seed(0)
    for layer in range(2):
        slots = torch.arange(32)
        pool.write(layer, slots, torch.randn(32, 2, 8, generator=g), torch.randn(32, 2, 8, generator=g))
    tensors = [pool.k, pool.v] + ([pool.k_scale, pool.v_scale, pool.k_min, pool.k_max] if kv else [])
    before = [[t.clone() for t in per_layer] for per_layer in tensors]
    swap = SwapSpace(pool, 4)
    host = swap.swap_out([5, 2, 7])
    assert swap.num_free == 1 and all(t.device.type == "cpu" for t in swap._slotted[0][1])
    for per_layer in tensors:
        for t in per_layer:
            t.zero_()
    swap.swap_in(host, [0, 6, 3])  # into other blocks
    assert swap.num_free == 4
    for i, (old, new) in enumerate(zip(before, tensors)):
        rows = 1 if i >= 4 else 4  # block summaries: one row per block
        for a, b in zip(old, new):
            for src, dst in ((5, 0), (2, 6), (7, 3)):
                assert torch.equal(b[dst * rows:(dst + 1) * rows], a[src * rows:(src + 1) * rows])


def test_bad_swap_blocks_is_a_clear_error(model):
    with pytest.raises(ValueError, match=r"engine\.swap_blocks.*-3"):
        EngineConfig(swap_blocks=-3)
    with pytest.raises(ValueError, match=r"engine\.swap_blocks.*-1"):
        LLM(model, swap_blocks=-1)
    assert LLM(model, max_seq_len=64).scheduler.swap is None  # 0: recompute only, no host memory
