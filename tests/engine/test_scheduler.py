"""The scheduler's step plan: forks join the step that computes their prompt, with the KV copies
the runner makes; what was computed is committed after the step."""

from tempering.engine.block_manager import BlockManager
from tempering.engine.sampling_params import SamplingParams
from tempering.engine.scheduler import Scheduler
from tempering.engine.sequence import Sequence, Status


def group(n, tokens=7):
    return [Sequence(0, i, list(range(tokens)), tokens, SamplingParams(n=n)) for i in range(n)]


def test_forks_join_the_step_that_computes_their_prompt_and_the_runner_gets_the_copies():
    bm = BlockManager(num_blocks=16, block_size=4)
    sched = Scheduler(bm, max_batch_size=8, max_batched_tokens=64)
    parent, *children = group(3)
    sched.add(parent, forks=children)
    assert [c.status for c in children] == [Status.FORK_PENDING] * 2
    out = sched.schedule(version=0)
    assert out.items == [(parent, 7)]  # the children compute nothing...
    assert out.sampled == [(parent, 0), (children[0], 0), (children[1], 0)]  # ...and sample from its logits
    tail = parent.block_table[1]  # tokens 4..6: the partial block each child copies
    assert out.copies == [(tail, c.block_table[1], 3) for c in children]
    assert all(c.block_table[0] == parent.block_table[0] and c.status is Status.RUNNING for c in children)
    sched.update(out, version=0)
    assert parent.num_computed == 7 and parent.num_registered == 1  # the full block is in the prefix cache


def test_forks_that_find_the_batch_full_queue_and_sample_later():
    bm = BlockManager(num_blocks=16, block_size=4)
    sched = Scheduler(bm, max_batch_size=2, max_batched_tokens=64)
    parent, *children = group(3)
    sched.add(parent, forks=children)
    out = sched.schedule(version=0)
    assert [s for s, _ in out.sampled] == [parent, children[0]] and len(out.copies) == 1
    assert children[1].status is Status.WAITING and list(sched.waiting) == [children[1]]
    sched.finish(children[1])  # abort: out of the queue
    assert not sched.waiting and children[1].status is Status.FINISHED
