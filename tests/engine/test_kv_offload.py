"""Cold KV blocks in a memory-mapped file (engine.kv_offload_dir) and the engine's KV report.
Residency is judged by the kernel (mincore), the data against what was written and against an
engine that keeps everything in memory."""

import pytest
import torch

from tempering.config import EngineConfig
from tempering.engine import LLM, SamplingParams
from tempering.engine.kv_cache import KVPool
from tempering.engine.kv_offload import tensor_resident_bytes
from tempering.models import Arch, build_model

ARCH = Arch(vocab_size=64, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, head_dim=16, max_position_embeddings=4096, tie_word_embeddings=False)
BS = 64  # 64 tokens x 2 heads x 16 x 4 bytes = 8 KiB: a block is whole pages


def _block_resident(pool: KVPool, layer: int, block: int) -> int:
    return tensor_resident_bytes(pool.k[layer][block * BS:(block + 1) * BS])


@pytest.mark.parametrize("dtype", ["fp32", "int8"])
def test_evicted_blocks_leave_memory_and_read_back_exactly(tmp_path, dtype):
    pool = KVPool(2, 8, BS if dtype == "fp32" else 4 * BS, 2, 16, dtype, offload_dir=tmp_path)
    bs = pool.block_size
    g = torch.Generator().manual_seed(0)
    slots = torch.arange(6 * bs)
    k, v = torch.randn(len(slots), 2, 16, generator=g), torch.randn(len(slots), 2, 16, generator=g)
    for layer in range(2):
        pool.write(layer, slots, k, v)
    expected = [pool.gather(layer, slots) for layer in range(2)]
    expected = [(a.clone(), b.clone()) for a, b in expected]
    pool.offload.idle_steps = 2  # a pass every 2 steps evicts what neither of them touched
    assert pool.offload.resident[:, :6].all() and not pool.offload.resident[:, 6:].any()
    pool.offload.evict()  # the write step (0) ends: no pass yet
    for _ in range(3):  # steps 1-3 read block 1 of layer 0 only; the pass after step 1 keeps step 0's
        pool.offload.touch(0, torch.tensor([1]))  # blocks (touched within 2 steps), the one after 3 does not
        pool.offload.evict()
    assert pool.offload.stats["written_back_bytes"] == pool.offload.stats["evicted_bytes"]  # all were dirty
    assert pool.offload.resident.sum() == 1 and pool.offload.dirty.sum() == 1  # block 1 of layer 0, unsaved
    nbytes = bs * 2 * 16 * pool.k[0].element_size()
    assert tensor_resident_bytes(pool.k[0][bs:2 * bs]) == nbytes  # still in memory
    for layer, block in [(0, 0), (0, 5), (1, 1), (1, 3)]:
        assert tensor_resident_bytes(pool.k[layer][block * bs:(block + 1) * bs]) == 0
        assert tensor_resident_bytes(pool.v[layer][block * bs:(block + 1) * bs]) == 0
    assert pool.offload.stats["evicted_bytes"] >= (6 * 2 * 2 - 2) * nbytes
    for layer in range(2):  # back from the file, bit for bit
        kk, vv = pool.gather(layer, slots)
        assert torch.equal(kk, expected[layer][0]) and torch.equal(vv, expected[layer][1])
    assert tensor_resident_bytes(pool.k[1][3 * bs:4 * bs]) == nbytes
    for _ in range(4):  # the reads age out; the one unsaved block is written back with them
        pool.offload.evict()
    assert not pool.offload.dirty.any() and tensor_resident_bytes(pool.k[0][bs:2 * bs]) == 0
    written, evicted = pool.offload.stats["written_back_bytes"], pool.offload.stats["evicted_bytes"]
    for layer in range(2):  # read again, not written: evicted again without a write-back
        pool.gather(layer, slots)
    for _ in range(4):
        pool.offload.evict()
    assert pool.offload.stats["written_back_bytes"] == written and pool.offload.stats["evicted_bytes"] > evicted
    assert not pool.offload.resident.any() and tensor_resident_bytes(pool.v[1][3 * bs:4 * bs]) == 0
    kk, _ = pool.gather(1, slots)
    assert torch.equal(kk, expected[1][0])


def _engine(model, **options) -> LLM:
    return LLM(model, max_seq_len=2200, block_size=BS, max_batch_size=2, max_batched_tokens=256,
               sparse_topk=3, **options)


def test_offloaded_engine_generates_the_same_and_holds_only_what_a_step_reads(tmp_path):
    model = build_model(ARCH, seed=0)
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(0, 64, (2000,), generator=g).tolist(), torch.randint(0, 64, (1500,), generator=g).tolist()]
    params = SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)
    want = _engine(model).generate(prompts, params)
    llm = _engine(model, kv_offload_dir=str(tmp_path))
    llm.pool.offload.idle_steps = 1  # the default 8 would keep most of these short contexts resident
    for p in prompts:
        llm.add_request(p, params)
    peak_running, resident_then = 0, []
    outs = {}
    while llm.has_unfinished():
        for o in llm.step():
            if o.finished:
                outs[o.request_id] = o
        usage = llm.kv_usage()
        if usage.running_bytes > peak_running:
            peak_running = usage.running_bytes
        resident_then.append(usage.resident_bytes)
    got = [outs[k] for k in sorted(outs)]
    for w, o in zip(want, got):
        assert o.outputs[0].token_ids == w.outputs[0].token_ids
        assert o.outputs[0].logprobs == w.outputs[0].logprobs  # the same bytes, read back from the file
    usage = llm.kv_usage()
    # a decode step reads per layer the sink, 2 local and 3 chosen blocks per kv head (2) of each
    # sequence, at most 18 of the 56 blocks the two contexts fill; what the last 1-2 steps chose stays
    assert max(resident_then[-10:]) < peak_running / 2
    assert usage.file_bytes >= 0.5 * peak_running  # the cold blocks went to the file
    assert llm.pool.offload.stats["prefetched_blocks"] > 0


def test_kv_usage_says_why_blocks_are_held():
    model = build_model(ARCH, seed=0)
    llm = LLM(model, max_seq_len=600, block_size=BS, max_batch_size=2, max_batched_tokens=256, kv_blocks=20)
    u = llm.kv_usage()
    assert u.block_bytes == 2 * 2 * BS * 2 * 16 * 4 and u.running_bytes == u.cached_bytes == 0
    assert u.free_bytes == 20 * u.block_bytes
    llm.add_request(list(range(1, 60)) * 5, SamplingParams(temperature=0, max_tokens=8, ignore_eos=True))
    llm.step()
    mid = llm.kv_usage()
    assert mid.running_bytes == 4 * u.block_bytes and mid.cached_bytes == 0  # the first chunk: 256 of 295 tokens
    while llm.has_unfinished():
        llm.step()
    end = llm.kv_usage()  # the 4 full prompt blocks stay cached for a later hit; the rest is free
    assert end.running_bytes == 0 and end.cached_bytes == 4 * u.block_bytes
    assert end.running_bytes + end.cached_bytes + end.free_bytes == 20 * u.block_bytes
    assert end.resident_bytes >= 5 * u.block_bytes and end.file_bytes == 0


def test_bad_offload_settings_name_the_key(tmp_path):
    model = build_model(ARCH, seed=0)
    with pytest.raises(ValueError, match=r"engine.kv_offload_dir: .*nowhere.* is not a directory"):
        LLM(model, max_seq_len=64, kv_offload_dir=str(tmp_path / "nowhere"))
    with pytest.raises(ValueError, match="engine.kv_offload_dir: only a CPU pool"):
        KVPool(1, 4, 4, 1, 8, device="meta", offload_dir=tmp_path)
    assert EngineConfig(kv_offload_dir=str(tmp_path)).kv_offload_dir == str(tmp_path)


def test_swapped_blocks_are_reported_and_swap_works_on_an_offloaded_pool(tmp_path):
    # Too few blocks for 8 sequences (decodes preempt by swap) on a file-backed pool: the report
    # counts the swapped blocks while they are out, and the output equals an uninterrupted run.
    model = build_model(ARCH, seed=0)
    g = torch.Generator().manual_seed(3)
    prompts = [torch.randint(0, 64, (int(n),), generator=g).tolist() for n in torch.randint(20, 40, (8,), generator=g)]
    params = SamplingParams(temperature=0, max_tokens=16, ignore_eos=True)
    want = LLM(model, max_seq_len=128).generate(prompts, params)
    llm = LLM(model, max_seq_len=128, kv_blocks=40, max_batch_size=8, max_batched_tokens=512, block_size=4,
              swap_blocks=200, kv_offload_dir=str(tmp_path))
    for p in prompts:
        llm.add_request(p, params)
    outs, swapped = {}, []
    while llm.has_unfinished():
        outs.update({o.request_id: o for o in llm.step() if o.finished})
        usage = llm.kv_usage()
        host = llm.scheduler.swap.num_blocks - llm.scheduler.swap.num_free
        assert usage.swapped_bytes == host * usage.block_bytes
        swapped.append(usage.swapped_bytes)
    assert llm.scheduler.swaps_out > 0 and max(swapped) > 0 and swapped[-1] == 0
    for w, k in zip(want, sorted(outs)):
        assert outs[k].outputs[0].token_ids == w.outputs[0].token_ids
        torch.testing.assert_close(torch.tensor(outs[k].outputs[0].logprobs), torch.tensor(w.outputs[0].logprobs),
                                   atol=1e-5, rtol=0)
