"""Far retrieval through the engine, on the hand-wired needle model (`models.needle`): its right
answers are known, each needing one key far back. Dense attention and block-sparse attention
(whose block selection must find that key's block among the context's) answer every probe; a
sliding window, which cannot see the key, answers none: the probes do depend on the far key.
The other tokens' keys are distractors with half a needle key's norm, so block summaries are
not zero away from the needles (at this size the selection held to 0.5; at 0.7 it missed 3 of
32 probes and at 1.0 most, with dense still right: bench/long_context.py --needle-noise)."""

from __future__ import annotations

import pytest

from tempering.engine import LLM, SamplingParams
from tempering.models.needle import NEEDLES, haystack, needle_model

LENGTH, BLOCK = 4096, 16


@pytest.fixture(scope="module")
def model():
    return needle_model(LENGTH + 64, noise=0.5)


def answers(model, doc, **options) -> list[int]:
    llm = LLM(model, max_seq_len=LENGTH + 64, block_size=BLOCK, max_batch_size=1, max_batched_tokens=1024, **options)
    greedy = SamplingParams(temperature=0, max_tokens=1)
    return [llm.generate([doc.ids[:p]], greedy)[0].outputs[0].token_ids[0] for p in doc.probes]


def test_dense_and_block_sparse_attention_retrieve_every_far_needle(model):
    doc = haystack(LENGTH, 2 * NEEDLES, seed=1)
    truth = [doc.ids[p] for p in doc.probes]
    assert min(doc.probes) - LENGTH // 4 > 256  # every key is over 256 tokens behind its query
    assert answers(model, doc) == truth  # the oracle: the model retrieves
    # 4 of the 256 blocks by score, besides a sink block and 2 local ones
    assert answers(model, doc, sparse_topk=4, sparse_sink_blocks=1, sparse_local_blocks=2) == truth
    assert answers(model, doc, sparse_topk=4, kv_dtype="int8") == truth
    window = answers(model, doc, sliding_window=256, attention_sinks=4)
    # without its key a probe's answer is a guess among the answer tokens (about 1 in 16)
    assert sum(w == t for w, t in zip(window, truth)) <= len(truth) // 4, window
