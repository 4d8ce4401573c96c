"""The engine's `AttentionPlan`: chosen once from the config and the machine, logged once, obeyed;
a plan the pool cannot run is refused."""

import logging
from dataclasses import fields, replace

import pytest

from engine_helpers import engine_with, random_prompts
from tempering.engine import LLM, SamplingParams
from tempering.engine.cpu import paged_decode, sampler, sparse_decode
from tempering.engine.kv_cache import KVPool
from tempering.engine.plan import AttentionPlan, choose_plan

KERNELS = paged_decode.built() and sparse_decode.built() and sampler.built()


def test_the_plan_is_chosen_and_logged_once_naming_each_path(model, caplog):
    with caplog.at_level(logging.INFO, logger="tempering.engine"):
        engine = LLM(model, max_seq_len=128)
        engine.generate(random_prompts(3, 5, 20), SamplingParams(n=2, max_tokens=8))
    lines = [r.getMessage() for r in caplog.records if r.name.startswith("tempering.engine")]
    assert len(lines) == 1 and lines[0].startswith("attention plan: ")
    for f in fields(AttentionPlan):
        if f.name != "why":
            assert f"{f.name}=" in lines[0]
    assert "sparse_decode=false (a dense engine)" in lines[0] and "int8_attention=never (a float32 pool)" in lines[0]


@pytest.mark.skipif(not KERNELS, reason="no C compiler here")
def test_a_cpu_pool_takes_the_kernels_and_a_config_turns_paths_off():
    fp32 = choose_plan(KVPool(1, 4, 16, 2, 16))
    assert (fp32.paged_decode, fp32.sparse_decode, fp32.int8_attention, fp32.cascade, fp32.native_sampler) == (
        True, False, "never", True, True)
    sparse_int8 = choose_plan(KVPool(1, 4, 16, 2, 16, dtype="int8", summaries=True), sparse=True)
    assert sparse_int8.sparse_decode and sparse_int8.int8_attention == "auto"
    windowed = choose_plan(KVPool(1, 4, 16, 2, 16), window=8, prefill="compiled flex")
    assert not windowed.cascade and windowed.flash_lse and windowed.prefill == "compiled flex"
    assert "cascade=false (a sliding window)" in windowed.describe()


def test_a_pool_off_the_cpu_takes_no_cpu_path():
    plan = choose_plan(KVPool(1, 4, 16, 2, 16, device="meta"), sparse=True)
    assert not (plan.paged_decode or plan.sparse_decode or plan.flash_lse or plan.cascade or plan.native_sampler)
    assert "paged_decode=false (a meta pool)" in plan.describe()
    assert "cascade=false (flash_lse is off)" in plan.describe()


def test_a_plan_the_pool_cannot_run_is_refused(model):
    fp32, meta = KVPool(1, 4, 16, 2, 16), KVPool(1, 4, 16, 2, 16, device="meta")
    plan = choose_plan(fp32)
    with pytest.raises(ValueError, match="AttentionPlan.int8_attention: cannot run here: not an int8 pool"):
        replace(plan, int8_attention="always").check(fp32)
    with pytest.raises(ValueError, match="AttentionPlan.sparse_decode: cannot run here: paged_decode is off"):
        replace(plan, paged_decode=False, sparse_decode=True).check(fp32)
    with pytest.raises(ValueError, match="AttentionPlan.native_sampler: cannot run here: a meta pool"):
        replace(choose_plan(meta), native_sampler=True).check(meta)
    with pytest.raises(ValueError, match="AttentionPlan.int8_attention"):
        engine_with(model, {"int8_attention": "auto"}, max_seq_len=128)


def test_a_given_plan_is_obeyed_and_logged_as_given(model, caplog):
    prompts = random_prompts(3, 70, 90, seed=2)  # n=3 share their prompt's blocks
    params = SamplingParams(n=3, temperature=0, max_tokens=8, ignore_eos=True)
    chosen = LLM(model, max_seq_len=256)
    with caplog.at_level(logging.INFO, logger="tempering.engine"):
        given = engine_with(model, {"cascade": False}, max_seq_len=256)
    assert caplog.records[-1].getMessage().startswith("attention plan: given: paged_decode=")
    outs = [e.generate(prompts, params) for e in (chosen, given)]
    assert chosen.plan.cascade and chosen.runner.shared_prefix_reads > 0
    assert given.runner.shared_prefix_reads == 0  # the shared prefix was read per sequence
    assert [c.token_ids for o in outs[0] for c in o.outputs] == [c.token_ids for o in outs[1] for c in o.outputs]
