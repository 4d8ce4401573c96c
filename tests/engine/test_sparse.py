"""Block-sparse attention (engine.sparse): with every block selected it is dense attention (the
dense engine is the oracle), in decode and chunked prefill, on all or some layers, with forks
and prefix-cache hits; with few blocks selected each row reads only its sink, local and top-k
blocks, and the top-k are the blocks whose keys match its query."""

from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F

from engine_helpers import ARCH, random_prompts, torch_threads
from tempering.engine import LLM, SamplingParams
from tempering.engine.kv_cache import KVPool
from tempering.engine.plan import AttentionPlan, choose_plan
from tempering.engine.sparse import SparseRows, SparseSpec, select

SMALL_STEPS = {"max_batched_tokens": 32, "max_batch_size": 8}  # prompts prefill in chunks


def _run(engine, prompts):
    params = [SamplingParams(n=3, temperature=0, max_tokens=30, ignore_eos=True),
              SamplingParams(n=2, temperature=1.0, seed=3, max_tokens=30, ignore_eos=True)]
    return [engine.generate(prompts, p) for p in params]  # the second hits the first's prefix cache


@pytest.mark.parametrize("layers", [(), (1,)], ids=["every layer", "layer 1"])
def test_every_block_selected_is_dense_attention(model, layers):
    prompts = random_prompts(5, 30, 100, seed=6)
    dense = _run(LLM(model, max_seq_len=256, **SMALL_STEPS), prompts)
    # 64 blocks of 4 tokens cover the 130 positions of the longest sequence
    sparse = _run(LLM(model, max_seq_len=256, sparse_topk=64, sparse_layers=layers, **SMALL_STEPS), prompts)
    for a, b in zip(dense, sparse):
        for x, y in zip(a, b):
            for cx, cy in zip(x.outputs, y.outputs):
                assert cy.token_ids == cx.token_ids
                torch.testing.assert_close(torch.tensor(cy.logprobs), torch.tensor(cx.logprobs), atol=1e-5, rtol=0)


def test_few_blocks_selected_change_the_result(model):
    # the oracle above would hold if the sparse path never ran: here it must run, and differ
    prompts = random_prompts(3, 90, 100, seed=6)
    params = SamplingParams(temperature=0, max_tokens=20, ignore_eos=True)
    dense = LLM(model, max_seq_len=256, **SMALL_STEPS).generate(prompts, params)
    sparse = LLM(model, max_seq_len=256, sparse_topk=1, sparse_local_blocks=1, **SMALL_STEPS).generate(prompts, params)
    assert any((torch.tensor(a.outputs[0].logprobs) - torch.tensor(b.outputs[0].logprobs)).abs().max() > 1e-3
               for a, b in zip(dense, sparse))


def test_few_blocks_read_and_the_matching_block_chosen():
    bs, kvh, d = 4, 1, 8
    pool = KVPool(layers=1, num_blocks=16, block_size=bs, kv_heads=kvh, head_dim=d, summaries=True)
    g = torch.Generator().manual_seed(0)
    keys = 0.1 * torch.randn(12 * bs, kvh, d, generator=g)
    target = torch.zeros(d)
    target[3] = 1.0
    keys[6 * bs + 2, 0] = 5 * target  # one key in block 6 matches the query
    table = torch.tensor([list(range(15, 3, -1))])  # the sequence's 12 blocks, in a scattered order
    slots = (table[0, :, None] * bs + torch.arange(bs)).reshape(-1)
    pool.write(0, slots, keys, keys)
    spec = SparseSpec(topk=1, sinks=1, local=2)
    rows = SparseRows(tokens=torch.tensor([[0]]), positions=torch.tensor([[12 * bs - 1]]), tables=table,
                      num_blocks=torch.tensor([12]))
    chosen = select(spec, pool, 0, target.view(1, 1, 1, d), rows)  # [row, kv head, block]
    assert sorted(chosen[0, 0].tolist()) == [0, 6, 10, 11]  # the sink, the match, the two local blocks
    # a context with fewer blocks than sinks + local + topk reads them all, once each
    rows.num_blocks = torch.tensor([3])
    rows.positions = torch.tensor([[3 * bs - 1]])
    assert sorted(select(spec, pool, 0, target.view(1, 1, 1, d), rows)[0, 0].tolist()) == [-1, 0, 1, 2]


def _plan(pool: KVPool, path: str) -> AttentionPlan:
    """The engine's plan for a sparse engine over `pool`, with the paths other than `path` off
    ("kernel": the plan as chosen, C kernels where built)."""
    plan = choose_plan(pool, sparse=True)
    if path == "kernel":
        return plan
    return replace(plan, paged_decode=False, sparse_decode=False, flash_lse=plan.flash_lse and path != "concat",
                   int8_attention="always" if path == "int8_attention" else "never")


@pytest.mark.parametrize("path", ["kernel", "sdpa"])
def test_each_kv_head_reads_the_blocks_that_match_its_own_queries(path):
    """Two kv heads whose queries match keys in different blocks: with one block to choose, each
    head takes its own match (one choice shared by the heads would miss one of them), and each
    head's output is attention over exactly its own blocks' keys (oracle: SDPA per head)."""
    from tempering.engine.sparse import attend

    bs, kvh, d, blocks = 4, 2, 16, 12
    pool = KVPool(layers=1, num_blocks=16, block_size=bs, kv_heads=kvh, head_dim=d, summaries=True)
    g = torch.Generator().manual_seed(4)
    keys = 0.1 * torch.randn(blocks * bs, kvh, d, generator=g)
    values = torch.randn(blocks * bs, kvh, d, generator=g)
    q = torch.zeros(kvh, d)
    q[0, 2], q[1, 9] = 1.0, 1.0
    keys[3 * bs + 1, 0] = 6 * q[0]  # head 0's match in block 3, head 1's in block 7
    keys[7 * bs + 2, 1] = 6 * q[1]
    table = torch.tensor([list(range(15, 3, -1))])
    slots = (table[0, :, None] * bs + torch.arange(bs)).reshape(-1)
    pool.write(0, slots, keys, values)
    rows = SparseRows(tokens=torch.tensor([[0]]), positions=torch.tensor([[blocks * bs - 1]]), tables=table,
                      num_blocks=torch.tensor([blocks]))
    spec = SparseSpec(topk=1, sinks=1, local=2)
    chosen = select(spec, pool, 0, q.view(1, 1, kvh, d), rows)
    assert [sorted(chosen[0, h].tolist()) for h in range(kvh)] == [[0, 3, 10, 11], [0, 7, 10, 11]]
    got = attend(spec, pool, 0, q.view(kvh, 1, d), rows, _plan(pool, path))[0, 0]  # [H, D]
    for h, own in enumerate(([0, 3, 10, 11], [0, 7, 10, 11])):
        at = torch.cat([torch.arange(b * bs, (b + 1) * bs) for b in own])
        want = F.scaled_dot_product_attention(q[h].view(1, 1, d), keys[at, h][None], values[at, h][None])
        torch.testing.assert_close(got[h], want.view(d), atol=1e-5, rtol=1e-5)


def test_query_blocks_of_one_chunk_score_as_if_each_were_alone():
    # A prefill chunk's query blocks share their sequence's table, and `select` scores them
    # against one copy of its summaries; each row alone takes the per-row path: the same choice.
    bs, kvh, heads, d, blocks = 4, 2, 6, 8, 40
    pool = KVPool(layers=1, num_blocks=48, block_size=bs, kv_heads=kvh, head_dim=d, summaries=True)
    g = torch.Generator().manual_seed(1)
    table = torch.randperm(48, generator=g)[:blocks]
    slots = (table[:, None] * bs + torch.arange(bs)).reshape(-1)
    keys = torch.randn(blocks * bs, kvh, d, generator=g)
    pool.write(0, slots, keys, keys)
    r, nq = 5, bs  # the chunk's last 5 query blocks
    q = torch.randn(r, nq, heads, d, generator=g)
    first = (blocks - r) * bs
    positions = torch.arange(first, blocks * bs).view(r, nq)
    tokens = torch.arange(r * nq).view(r, nq)
    tokens[-1, 2:] = -1  # the chunk ends inside its last block: padding queries
    positions[-1, 2:] = -1
    rows = SparseRows(tokens=tokens, positions=positions, tables=table.expand(r, blocks),
                      num_blocks=torch.arange(blocks - r + 1, blocks + 1))
    spec = SparseSpec(topk=4, sinks=1, local=2)
    together = select(spec, pool, 0, q.masked_fill((tokens < 0)[:, :, None, None], 0), rows)
    for i in range(r):
        alone = SparseRows(tokens[i:i + 1], positions[i:i + 1], table[None], rows.num_blocks[i:i + 1])
        one = select(spec, pool, 0, q[i:i + 1].masked_fill((tokens[i:i + 1] < 0)[:, :, None, None], 0), alone)
        for h in range(kvh):
            assert sorted(one[0, h].tolist()) == sorted(together[i, h].tolist()), (i, h)


def test_block_summaries_bound_every_key_of_their_block(model):
    engine = LLM(model, max_seq_len=256, sparse_topk=2, **SMALL_STEPS)
    engine.generate(random_prompts(3, 40, 80, seed=2), SamplingParams(n=2, temperature=1.0, seed=1, max_tokens=20))
    pool = engine.pool
    for layer in range(ARCH.num_hidden_layers):
        k = pool.k[layer].view(-1, pool.block_size, pool.kv_heads, pool.head_dim)
        used = torch.isfinite(pool.k_min[layer]).all(-1).all(-1)  # blocks written since the pool began
        assert used.sum() > 10
        # a block's min and max bound the keys written into it (its first slot is always written)
        first = k[used][:, 0]
        assert (pool.k_min[layer][used] <= first).all() and (first <= pool.k_max[layer][used]).all()


def test_sparse_settings_are_checked():
    from tempering.config import ConfigError

    with pytest.raises(ConfigError, match="engine.sparse_topk"):
        LLM(torch.nn.Module(), sparse_topk=2, sliding_window=16)
    with pytest.raises(ConfigError, match="engine.sparse_local_blocks"):
        LLM(torch.nn.Module(), sparse_topk=2, sparse_local_blocks=0)
    with pytest.raises(ConfigError, match="engine.sparse_rest_group"):
        LLM(torch.nn.Module(), sparse_topk=2, sparse_rest_group=-1)


def test_sparse_layers_outside_the_model_are_refused(model):
    with pytest.raises(ValueError, match=r"sparse_layers \[5\] are not layers of a 2-layer model"):
        LLM(model, sparse_topk=2, sparse_layers=(5,))


# kernel: decode rows through paged_decode; sdpa: gather + SDPA's CPU kernel with its log-sum-exp;
# concat: gather + SDPA with the group means as more keys (devices without that kernel)
PATHS = [("fp32", "kernel"), ("fp32", "sdpa"), ("fp32", "concat"), ("int8", "kernel"), ("int8", "int8_attention"),
         ("int8", "sdpa")]


@pytest.mark.parametrize("kv_dtype,path", PATHS, ids=[f"{a}-{b}" for a, b in PATHS])
def test_unread_blocks_whose_keys_are_alike_are_attended_exactly_through_their_means(kv_dtype, path):
    """Oracle: dense attention. Keys equal within each group of `rest_group` blocks (values all
    different) make a group's mean key with its count's weight exact: the sparse rows, reading a
    few blocks and the rest as group means, then equal dense attention, for a decode row (its own
    table) and the query blocks of a prefill chunk (one shared table). Without the means they
    do not."""
    _means_are_exact(kv_dtype, group=4, rest_group=4, path=path)


def test_groups_grow_to_keep_their_number_bounded(monkeypatch):
    """26 blocks in at most 3 groups: groups of 9 blocks, whatever `rest_group` says; keys alike
    within 9 blocks make their means exact, keys alike only within 4 then do not."""
    from tempering.engine import sparse

    monkeypatch.setattr(sparse, "MAX_GROUPS", 3)
    _means_are_exact("fp32", group=9, rest_group=4)
    _means_are_exact("fp32", group=4, rest_group=4, exact=False)


def _means_are_exact(kv_dtype: str, group: int, rest_group: int, exact: bool = True, path: str = "kernel") -> None:
    from tempering.engine.sparse import attend

    bs, kvh, heads, d, blocks = 4, 2, 4, 8, 26
    g = torch.Generator().manual_seed(3)
    pool = KVPool(layers=1, num_blocks=32, block_size=bs, kv_heads=kvh, head_dim=d, dtype=kv_dtype, summaries=True)
    table = torch.randperm(32, generator=g)[:blocks]
    length = blocks * bs - 2  # the last block is partial
    slots = (table[:, None] * bs + torch.arange(bs)).reshape(-1)[:length]
    per_group = torch.randn(-(-blocks // group), kvh, d, generator=g)
    keys = per_group.repeat_interleave(group * bs, 0)[:length]
    values = torch.randn(length, kvh, d, generator=g)
    pool.write(0, slots, keys, values)
    k_all, v_all = (t.clone() for t in pool.gather(0, slots))  # as stored (int8: dequantized)

    def dense(q, positions):  # q [N, H, D] at `positions` [N]
        mask = torch.arange(length)[None] <= positions[:, None]  # [N, K]
        rep = heads // kvh
        kk, vv = (t.repeat_interleave(rep, 1).transpose(0, 1) for t in (k_all, v_all))  # [H, K, D]
        return F.scaled_dot_product_attention(q.transpose(0, 1), kk, vv, attn_mask=mask).transpose(0, 1)

    q = torch.randn(heads, 12, d, generator=g)
    decode = SparseRows(tokens=torch.tensor([[0]]), positions=torch.tensor([[length - 1]]), tables=table[None],
                        num_blocks=torch.tensor([blocks]))
    # the chunk's last 10 queries: rows of whole blocks, the last ending in padding
    positions = torch.arange(length - 10, length)
    tokens = torch.tensor([[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, -1, -1]])
    chunk = SparseRows(tokens=tokens, positions=torch.cat([positions, torch.tensor([-1, -1])]).view(3, 4),
                       tables=table.expand(3, blocks), num_blocks=torch.tensor([blocks - 2, blocks - 1, blocks]))
    for rows, at in ((decode, positions[-1:]), (chunk, positions)):
        want = dense(q[:, :len(at)].transpose(0, 1), at)  # [N, H, D]
        for means, equal in ((rest_group, exact), (0, False)):
            spec = SparseSpec(topk=2, sinks=1, local=2, rest_group=means)
            got = attend(spec, pool, 0, q[:, :len(at)], rows, _plan(pool, path))  # [R, Q, H, D]
            got = got[rows.tokens >= 0]
            close = torch.allclose(got, want, atol=1e-5, rtol=1e-4)
            assert close == equal, (rows is decode, means, (got - want).abs().max())


def test_a_forked_partial_block_sums_only_the_slots_copied():
    pool = KVPool(layers=2, num_blocks=4, block_size=4, kv_heads=1, head_dim=3, summaries=True)
    k, v = torch.randn(4, 1, 3), torch.randn(4, 1, 3)
    pool.write(1, torch.arange(4), k, v)
    pool.copy_block(0, 2, 3)  # a fork of a sequence whose last block holds 3 tokens
    torch.testing.assert_close(pool.k_sum[1][2], k[:3].sum(0))
    torch.testing.assert_close(pool.v_sum[1][2], v[:3].sum(0))
    pool.write(1, torch.tensor([11]), k[3:], 2 * v[3:])  # the fork's own 4th token
    torch.testing.assert_close(pool.v_sum[1][2], v[:3].sum(0) + 2 * v[3])


def test_block_scores_of_several_rows_by_either_path_match_a_loop():
    """Quest's bound per row, kv head and block of its table: scoring every pool block at once (tables that
    cover the pool) and copying the rows' blocks out (a pool much larger) both give the plain
    loop's numbers; unlisted blocks with infinite bounds (never written) do not leak in."""
    from tempering.engine.sparse import _block_scores

    g = torch.Generator().manual_seed(5)
    lengths, width, kvh, d = [5, 9, 12], 12, 2, 8
    for pool_blocks in (40, 400):  # 3 x 36 listed >= 40: every block scored; < 400: copied out
        hi, lo = torch.randn(pool_blocks, kvh, d, generator=g), torch.randn(pool_blocks, kvh, d, generator=g)
        order = torch.randperm(pool_blocks, generator=g)
        tables = torch.zeros(3, width, dtype=torch.long)
        at = 0
        for r, n in enumerate(lengths):
            tables[r, :n] = order[at: at + n]
            at += n
        hi[order[at:]], lo[order[at:]] = torch.inf, -torch.inf  # blocks no table lists
        top, bottom = torch.randn(3, kvh, d, generator=g), torch.randn(3, kvh, d, generator=g)
        got = _block_scores(hi, lo, top, bottom, tables)
        for r, n in enumerate(lengths):
            for w in range(n):
                b = tables[r, w]
                for h in range(kvh):
                    want = top[r, h] @ hi[b, h] + bottom[r, h] @ lo[b, h]
                    torch.testing.assert_close(got[r, h, w], want, rtol=1e-5, atol=1e-5)


def test_unread_group_means_of_several_decode_rows_match_a_loop(monkeypatch):
    """Decode rows of different lengths, each with its own table: every group's mean key and value
    over the blocks a row does not read through each kv head (the heads read different ones), and the log of how many keys it stands for, as a plain
    loop over the pool's per-block sums computes them (groups past a row's last block: none)."""
    from tempering.engine import sparse

    monkeypatch.setattr(sparse, "MAX_GROUPS", 3)  # 13 blocks: groups grow from 2 to 5 blocks
    bs, kvh, d, lengths, width = 4, 2, 8, [3, 7, 13], 13
    g = torch.Generator().manual_seed(6)
    pool = KVPool(layers=1, num_blocks=40, block_size=bs, kv_heads=kvh, head_dim=d, summaries=True)
    order = torch.randperm(40, generator=g)
    tables, at = torch.zeros(3, width, dtype=torch.long), 0
    for r, n in enumerate(lengths):
        tables[r, :n] = order[at: at + n]
        slots = (tables[r, :n, None] * bs + torch.arange(bs)).reshape(-1)
        pool.write(0, slots, torch.randn(len(slots), kvh, d, generator=g), torch.randn(len(slots), kvh, d, generator=g))
        at += n
    rows = SparseRows(tokens=torch.tensor([[0], [1], [2]]), positions=torch.tensor([[n * bs - 1] for n in lengths]),
                      tables=tables, num_blocks=torch.tensor(lengths))
    # the blocks each row reads through each kv head (-1: none)
    chosen = torch.tensor([[[0, 2, -1], [0, 1, -1]], [[0, 5, 6], [0, 5, 6]], [[0, 3, 12], [0, 9, 12]]])
    spec = SparseSpec(topk=1, sinks=1, local=1, rest_group=2)
    got = sparse.rest(spec, pool, 0, rows, chosen)
    size = 5  # ceil(13 / 3)
    for r, n in enumerate(lengths):
        for h in range(kvh):
            for i in range(3):
                blocks = [w for w in range(i * size, min((i + 1) * size, n)) if w not in chosen[r, h].tolist()]
                if not blocks:
                    assert got.bias[r, h, i] == -torch.inf
                    continue
                ids = tables[r, blocks]
                torch.testing.assert_close(got.keys[r, h, i], pool.k_sum[0][ids, h].sum(0) / (len(blocks) * bs))
                torch.testing.assert_close(got.values[r, h, i], pool.v_sum[0][ids, h].sum(0) / (len(blocks) * bs))
                assert got.bias[r, h, i].item() == pytest.approx(float(torch.log(torch.tensor(len(blocks) * bs))))


@pytest.mark.parametrize("spec", [SparseSpec(topk=3, sinks=1, local=2, rest_group=2), SparseSpec(topk=2, sinks=2, local=1),
                                  SparseSpec(topk=0, sinks=1, local=2, rest_group=3)], ids=["means", "no-means", "topk-0"])
def test_decode_rows_planned_in_c_read_what_the_pytorch_plan_reads(spec, monkeypatch):
    """Oracle: `select`, `_reads` and `rest` in PyTorch. For decode rows of different lengths (some
    shorter than what a row may read), each with its own table, `sparse_decode.plan` gives the
    same slots and mask, and the queries' attention over the same group means (groups grown past
    MAX_GROUPS), on one thread or with its (row, kv head) pairs split over three; and `attend` through it (the paged kernel folding that attention into its own)
    gives the output of the PyTorch plan read by the same kernel and merged after."""
    from tempering.engine import sparse
    from tempering.engine.cpu import sparse_decode
    from tempering.engine.sparse import _attend_rest, _reads, attend, rest

    if not sparse_decode.built():
        pytest.skip("no C compiler here")
    monkeypatch.setattr(sparse, "MAX_GROUPS", 4)
    bs, kvh, heads, d, lengths = 4, 2, 4, 16, [3, 7, 13, 20]
    width, g = max(lengths), torch.Generator().manual_seed(8)
    pool = KVPool(layers=1, num_blocks=64, block_size=bs, kv_heads=kvh, head_dim=d, summaries=True)
    order, at = torch.randperm(64, generator=g), 0
    tables = torch.zeros(len(lengths), width, dtype=torch.long)
    for r, n in enumerate(lengths):
        tables[r, :n] = order[at: at + n]
        slots = (tables[r, :n, None] * bs + torch.arange(bs)).reshape(-1)[:n * bs - 1]  # the last block partial
        pool.write(0, slots, torch.randn(len(slots), kvh, d, generator=g), torch.randn(len(slots), kvh, d, generator=g))
        at += n
    rows = SparseRows(tokens=torch.arange(len(lengths))[:, None], positions=torch.tensor([[n * bs - 2] for n in lengths]),
                      tables=tables, num_blocks=torch.tensor(lengths))
    q = torch.randn(len(lengths), heads, d, generator=g)
    chosen = select(spec, pool, 0, q[:, None], rows)
    slots, _, mask = _reads(rows, chosen, bs)
    unread = rest(spec, pool, 0, rows, chosen)
    per_group, groups = sparse._grouping(spec, width)
    assert (groups > 0) == (unread is not None)
    got_slots, got_mask, attended = sparse_decode.plan(spec, pool, 0, q, tables, rows.num_blocks,
                                                       rows.positions[:, 0], groups, per_group)
    assert torch.equal(got_mask, mask[:, 0].repeat_interleave(kvh, 0))
    assert torch.equal(got_slots, slots)
    assert (attended is None) == (unread is None)
    monkeypatch.setattr(sparse_decode, "SPLIT_BLOCKS", 1)
    with torch_threads(3):  # 8 (row, kv head) pairs on 3 threads: the same plan
        split = sparse_decode.plan(spec, pool, 0, q, tables, rows.num_blocks, rows.positions[:, 0], groups, per_group)
    assert torch.equal(split[0], got_slots) and torch.equal(split[1], got_mask)
    assert attended is None or all(torch.equal(x, y) for x, y in zip(split[2], attended))
    if unread is not None:  # the queries over the group means: their output and log-sum-exp
        assert groups == 4 and per_group == 5  # 20 blocks in at most 4 groups
        want_out, want_lse = _attend_rest(q[:, :, None], unread)
        torch.testing.assert_close(attended[0], want_out[:, :, 0], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(attended[1], want_lse[:, :, 0], atol=1e-5, rtol=1e-5)
    plan = choose_plan(pool, sparse=True)
    assert plan.sparse_decode
    want = attend(spec, pool, 0, q.transpose(0, 1), rows, replace(plan, sparse_decode=False))
    torch.testing.assert_close(attend(spec, pool, 0, q.transpose(0, 1), rows, plan), want, atol=1e-6, rtol=1e-5)
