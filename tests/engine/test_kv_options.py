"""KV storage and attention options: int8 KV, sliding window + sinks, block-sparse flex attention."""

import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from engine_helpers import ARCH, assert_matches_trainer, random_prompts
from tempering.engine import LLM, SamplingParams
from tempering.engine.kv_cache import HUGE_PAGE, KVPool
from tempering.engine.kv_quant import dequantize, quantize
from tempering.models import build_model


def test_int8_round_trip_error_is_half_a_step():
    x = torch.randn(50, 2, 16) * 3
    q, scale = quantize(x)
    assert q.dtype == torch.int8 and scale.dtype == torch.float16
    assert ((dequantize(q, scale) - x).abs() <= scale.float() / 2 + 1e-6).all()


def _vm_flags(address: int) -> list[str]:
    """The VmFlags of the mapping holding `address`, from /proc/self/smaps."""
    inside = False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()[0]
        if head == "VmFlags:" and inside:
            return line.split()[1:]
        if "-" in head and not head.endswith(":"):
            lo, hi = (int(x, 16) for x in head.split("-"))
            inside = lo <= address < hi
    raise AssertionError(f"no mapping holds {address:#x}")


@pytest.mark.skipif(sys.platform != "linux" or not Path("/sys/kernel/mm/transparent_hugepage").exists(),
                    reason="transparent huge pages are a Linux feature this kernel lacks")
@pytest.mark.parametrize("kv_dtype", ["fp32", "int8"])
def test_a_cpu_pools_keys_and_values_ask_for_huge_pages(kv_dtype, tmp_path):
    pool = KVPool(2, 4096, 16, 2, 64, dtype=kv_dtype)  # 4-8 MiB per tensor
    for t in pool.k + pool.v:
        start, end = t.data_ptr(), t.data_ptr() + t.numel() * t.element_size()
        inner = -(-start // HUGE_PAGE) * HUGE_PAGE
        assert inner + HUGE_PAGE <= end and "hg" in _vm_flags(inner)  # hg: madvise(MADV_HUGEPAGE)
    pool.write(1, torch.tensor([5, 60000]), torch.ones(2, 2, 64), torch.full((2, 2, 64), 2.0))
    k, v = pool.gather(1, torch.tensor([60000, 5]))
    assert torch.allclose(k, torch.ones_like(k), atol=1e-3) and torch.allclose(v, torch.full_like(v, 2.0), atol=1e-3)
    offloaded = KVPool(2, 4096, 16, 2, 64, offload_dir=tmp_path)  # a file's pages: left as they are
    assert "hg" not in _vm_flags(-(-offloaded.k[0].data_ptr() // HUGE_PAGE) * HUGE_PAGE)


def test_int8_kv_agrees_with_fp32_and_uses_under_0_3x_the_bytes(model):
    fp32 = LLM(model, max_seq_len=256)
    int8 = LLM(model, max_seq_len=256, kv_dtype="int8")
    assert int8.pool.bytes_per_token <= 0.3 * fp32.pool.bytes_per_token
    prompts = random_prompts(10, 5, 30, seed=9)
    greedy = SamplingParams(temperature=0, max_tokens=100, ignore_eos=True)
    refs = [o.outputs[0].token_ids for o in fp32.generate(prompts, greedy)]
    one = SamplingParams(temperature=0, max_tokens=1, ignore_eos=True)
    agree = 0
    for k in range(100):  # teacher-forced on fp32's tokens: 1,000 positions in all
        outs = int8.generate([p + r[:k] for p, r in zip(prompts, refs)], one)
        agree += sum(o.outputs[0].token_ids[0] == r[k] for o, r in zip(outs, refs))
    assert agree >= 990
    assert int8.blocks.stats["hit_tokens"] > 0  # each step above reused the int8 prefix


@pytest.mark.parametrize("kv_dtype,store", [("fp16", torch.float16), ("bf16", torch.bfloat16)])
def test_16_bit_kv_holds_the_rounded_keys_in_half_the_bytes(kv_dtype, store):
    """Under a float32 model a 16-bit pool stores keys and values rounded once, gathers them
    widened back (exactly those values), and its block summaries bound what is stored."""
    pool = KVPool(1, 8, 4, 2, 16, dtype=kv_dtype, summaries=True)
    assert pool.store_dtype == store and pool.k[0].dtype == store and pool.dtype == torch.float32
    assert pool.bytes_per_token * 2 == KVPool(1, 8, 4, 2, 16).bytes_per_token
    g = torch.Generator().manual_seed(2)
    k, v = torch.randn(8, 2, 16, generator=g) * 3, torch.randn(8, 2, 16, generator=g)
    slots = torch.arange(4, 12)
    pool.write(0, slots, k, v)
    kk, vv = pool.gather(0, slots)
    assert kk.dtype == torch.float32
    assert torch.equal(kk, k.to(store).float()) and torch.equal(vv, v.to(store).float())
    assert not torch.equal(kk, k)  # rounded, not kept whole
    stored = k.to(store).float().view(2, 4, 2, 16)
    assert torch.equal(pool.k_min[0][1:3], stored.amin(1)) and torch.equal(pool.k_max[0][1:3], stored.amax(1))


def test_16_bit_kv_agrees_with_fp32(model):
    """A float16 pool's engine follows the float32 pool's greedy tokens almost everywhere, its
    logprobs off by float16's rounding of the keys and values it read (not zero, under 0.01)."""
    fp32 = LLM(model, max_seq_len=256)
    half = LLM(model, max_seq_len=256, kv_dtype="fp16")
    prompts = random_prompts(10, 5, 30, seed=9)
    greedy = SamplingParams(temperature=0, max_tokens=60, ignore_eos=True)
    refs, mine = (e.generate(prompts, greedy) for e in (fp32, half))
    agree, gaps = 0, []
    for r, m in zip(refs, mine):
        a, b = r.outputs[0], m.outputs[0]
        same = next((i for i, (x, y) in enumerate(zip(a.token_ids, b.token_ids)) if x != y), len(a.token_ids))
        agree += same
        # the first token comes from the prompt's own fresh keys; the later ones read the pool
        gaps += [abs(x - y) for x, y in zip(a.logprobs[1:same], b.logprobs[1:same])]
    assert agree >= 0.95 * 600
    assert 0 < max(gaps) < 1e-2


def test_int8_forks_copy_the_partial_block_with_its_scales(model):
    engine = LLM(model, max_seq_len=128, kv_dtype="int8")
    prompt = random_prompts(1, 22, 23, seed=14)[0]  # 22 tokens: the forks copy a half-full block
    out = engine.generate([prompt], SamplingParams(n=3, temperature=0, max_tokens=16, ignore_eos=True))[0]
    first = out.outputs[0]
    for c in out.outputs[1:]:
        assert c.token_ids == first.token_ids
        torch.testing.assert_close(torch.tensor(c.logprobs), torch.tensor(first.logprobs), atol=1e-5, rtol=0)


@pytest.mark.parametrize("attention", ["sdpa", "flex"])
def test_sliding_window_with_sinks_matches_a_masked_full_recompute(model, attention):
    engine = LLM(model, max_seq_len=512, sliding_window=24, attention_sinks=3, attention=attention,
                 max_batched_tokens=32, max_batch_size=8)
    prompts = random_prompts(3, 40, 70, seed=10)
    params = SamplingParams(n=2, temperature=1.0, max_tokens=40, seed=3, ignore_eos=True)
    for p, out in zip(prompts, engine.generate(prompts, params)):
        for c in out.outputs:
            assert_matches_trainer(model, p, c, window=24, sinks=3)


def test_a_first_prefill_chunk_shorter_than_the_sinks_reads_only_itself(model):
    # 18 sequences in 8 rows and 32 tokens a step: a prompt's first chunk is sometimes the 2
    # tokens a step has left after its decodes, fewer than the 3 sinks (this once crashed)
    engine = LLM(model, max_seq_len=256, sliding_window=24, attention_sinks=3, max_batched_tokens=32,
                 max_batch_size=8)
    prompts = random_prompts(6, 20, 90, seed=4)
    params = SamplingParams(n=3, temperature=1.0, max_tokens=40, seed=5, ignore_eos=True)
    for p, out in zip(prompts, engine.generate(prompts, params)):
        for c in out.outputs:
            assert_matches_trainer(model, p, c, window=24, sinks=3)


def test_sliding_window_generates_3000_tokens_in_bounded_kv_memory():
    # One layer: this test is about memory over 3,000 steps (47 windows); the window's numerics are above.
    small = build_model(replace(ARCH, num_hidden_layers=1, hidden_size=32, intermediate_size=32,
                                num_attention_heads=2, num_key_value_heads=1), seed=0).eval()
    engine = LLM(small, max_seq_len=3_100, sliding_window=64, attention_sinks=4, max_batch_size=1,
                 max_batched_tokens=64)
    prompt = random_prompts(1, 30, 31, seed=11)[0]
    out = engine.generate([prompt], SamplingParams(temperature=1.0, max_tokens=3_000, seed=0, ignore_eos=True))
    assert len(out[0].outputs[0].token_ids) == 3_000
    bs = engine.cfg.block_size
    bound = -(-4 // bs) + -(-(64 + 64) // bs) + 2  # sinks, window + one chunk, partial blocks
    assert engine.stats["peak_blocks"] <= bound
    assert engine.blocks.num_blocks * bs < 3_000  # the pool itself could not hold the sequence
