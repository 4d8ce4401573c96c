"""Block accounting, prefix hits and misses, version salting, LRU eviction, forks and windows."""

import pytest

from tempering.engine.block_manager import BlockManager
from tempering.engine.sampling_params import SamplingParams
from tempering.engine.sequence import DROPPED, Sequence


def seq(tokens, rid=0):
    return Sequence(rid, 0, list(tokens), len(tokens), SamplingParams())


def computed(bm, s, version=0):
    """Pretend the model computed all of `s` but its last token, as a finished prefill does."""
    assert bm.ensure(s, len(s.tokens) - 1)
    s.num_computed = len(s.tokens) - 1
    bm.commit(s, version)


def test_ensure_and_release_account_every_block():
    bm = BlockManager(num_blocks=8, block_size=4)
    s = seq(range(10))
    assert bm.ensure(s, 10) and len(s.block_table) == 3 and bm.num_available == 5
    assert bm.ensure(s, 12) and len(s.block_table) == 3  # still inside the third block
    assert not bm.ensure(s, 40) and len(s.block_table) == 3  # all or nothing
    bm.release(s)
    assert s.block_table == [] and bm.num_available == 8 and sorted(bm.ref) == [0] * 8


def test_prefix_hits_and_misses():
    bm = BlockManager(num_blocks=16, block_size=4)
    a = seq(range(13))
    computed(bm, a)  # 12 computed tokens = 3 full blocks registered
    b = seq(list(range(12)) + [99, 98])  # same first 3 blocks, different tail
    assert bm.match_prefix(b, version=0) == 12 and b.block_table == a.block_table[:3]
    assert all(bm.ref[x] == 2 for x in a.block_table[:3])
    c = seq([5] + list(range(1, 13)))  # differs in the first token: the chain misses from the start
    assert bm.match_prefix(c, version=0) == 0 and c.block_table == []
    d = seq(range(12))  # the whole prompt is cached, but its last token must be computed
    assert bm.match_prefix(d, version=0) == 8


def test_version_salts_the_cache():
    bm = BlockManager(num_blocks=16, block_size=4)
    a = seq(range(9))
    computed(bm, a, version=3)
    bm.release(a)
    assert bm.match_prefix(seq(range(9)), version=4) == 0
    assert bm.match_prefix(seq(range(9)), version=3) == 8
    bm2 = BlockManager(num_blocks=16, block_size=4)
    computed(bm2, seq(range(9)), version=3)
    bm2.clear_cache()
    assert bm2.match_prefix(seq(range(9)), version=3) == 0


def test_unreferenced_cached_blocks_are_evicted_least_recently_used_first():
    bm = BlockManager(num_blocks=4, block_size=2)
    old, new = seq([1, 2, 3]), seq([7, 8, 9])
    computed(bm, old)
    computed(bm, new)
    bm.release(old)
    bm.release(new)  # both cached, old released first
    assert bm.num_available == 4 and len(bm.cached) == 2
    hog = seq(range(20, 26))
    assert bm.ensure(hog, 6)  # 3 blocks: 2 free ones, then evicts `old`'s block
    assert bm.stats["evictions"] == 1
    assert bm.match_prefix(seq([1, 2, 3]), 0) == 0 and bm.match_prefix(seq([7, 8, 9]), 0) == 2


def test_fork_shares_full_blocks_and_hands_out_one_for_the_partial_tail():
    bm = BlockManager(num_blocks=8, block_size=4)
    parent = seq(range(7))
    assert bm.ensure(parent, 6)
    parent.num_computed = 6
    child = seq(range(7))
    copies = bm.fork(parent, child)
    assert child.block_table[0] == parent.block_table[0] and bm.ref[parent.block_table[0]] == 2
    fresh = child.block_table[1]
    assert fresh != parent.block_table[1] and child.num_computed == 6
    assert copies == [(parent.block_table[1], fresh, 2)]  # the runner copies the 2 filled slots
    aligned = seq(range(9))
    assert bm.fork(parent, aligned, upto=4) == [] and aligned.block_table == parent.block_table[:1]
    for s in (parent, child, aligned):
        bm.release(s)
    assert bm.num_available == 8


def test_computed_commits_full_blocks_and_slides_the_window():
    bm = BlockManager(num_blocks=64, block_size=4, window=16, sinks=2)
    s = seq(range(100))
    assert bm.ensure(s, 100)
    bm.computed(s, 60, version=0)
    assert s.num_computed == 60 and s.num_registered == 15  # 15 full blocks offered to the cache
    bm.computed(s, 40, version=0)
    assert s.num_computed == 100 and s.block_table[0] != DROPPED and s.block_table[-5] == DROPPED
    bm.release(s)
    assert bm.num_available == 64


def test_sliding_window_frees_blocks_behind_the_window_but_keeps_sinks():
    bm = BlockManager(num_blocks=64, block_size=4)
    s = seq(range(100))
    assert bm.ensure(s, 100)
    s.num_computed = 100
    bm.slide(s, window=16, sinks=2)
    live = [b for b in s.block_table if b != DROPPED]
    assert s.block_table[0] != DROPPED  # holds the sinks
    # The next query (position 100) sees positions 85..100: blocks from position 84 on stay.
    assert all(b != DROPPED for b in s.block_table[-4:]) and s.block_table[-5] == DROPPED
    assert len(live) == 1 + 4 and bm.num_available == 64 - 5
    bm.release(s)
    assert bm.num_available == 64


def test_bad_sizes_are_errors():
    with pytest.raises(ValueError, match="num_blocks"):
        BlockManager(num_blocks=0, block_size=4)
