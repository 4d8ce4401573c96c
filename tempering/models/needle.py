"""A needle in a haystack, wired by hand: a one-layer decoder that answers a query token by
retrieving the key token paired with it, wherever in the context that key lies, and a document
to ask it with. An oracle for long-context attention: its right answers are known, so an
attention that loses far keys (a window, a block selection that misses) shows as wrong tokens.

Vocabulary: filler tokens, then `NEEDLES` key tokens K_m, query tokens Q_m and answer tokens A_m.
Attention head 0 matches a query Q_m to the key K_m only (orthogonal codes; every other token's
key and query in that head are exactly zero) with a score of `sharpness` nats, reads K_m's value
(the m-th unit vector) and writes it along a direction the LM head reads as A_m. The codes live
in the head's lowest rotary frequencies under a rope_theta of 1e12, where a million positions
turn them by about 0.03 rad: the match does not fade with distance. Everything else (the other
heads, the MLP) is zero, and so are the other tokens' keys in head 0 unless `noise` gives them
random ones (distractors: scores that a block's summary must see past). The projections are solved exactly from the normalized embeddings
(fewer tokens than hidden dims), so each token's query, key and value are what the design says.

It is not trained and not a language model: it tests where attention looks, not what it learns.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch

from tempering.models.arch import Arch
from tempering.models.decoder import Decoder

NEEDLES = 16
FILLERS = 152
VOCAB = FILLERS + 3 * NEEDLES  # fillers, keys, queries, answers
HEAD_DIM, HIDDEN = 64, 256
CODE_PAIRS = range(20, 32)  # rotary pairs (i, i + 32) turned slowest under rope_theta 1e12


def key(m: int) -> int:
    return FILLERS + m


def query(m: int) -> int:
    return FILLERS + NEEDLES + m


def answer(m: int) -> int:
    return FILLERS + 2 * NEEDLES + m


@dataclass
class Haystack:
    ids: list[int]  # the document
    probes: list[int]  # positions p: ids[p - 1] is a query token, ids[p] its answer


def arch(max_len: int) -> Arch:
    return Arch(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=64, num_hidden_layers=1,
                num_attention_heads=4, num_key_value_heads=2, head_dim=HEAD_DIM, max_position_embeddings=max_len,
                rope_theta=1e12, tie_word_embeddings=False)


def needle_model(max_len: int, sharpness: float = 30.0, noise: float = 0.0, seed: int = 0) -> Decoder:
    """The retrieval decoder, for prompts of up to `max_len` tokens. `sharpness`: the query's
    score on its key, in nats, over every other key's 0 (30 outweighs a million keys). `noise`:
    every other token's key in head 0 is random with this fraction of a needle key's norm (its
    score on a query is then about normal with sd sharpness x noise / 5)."""
    g = torch.Generator().manual_seed(seed)
    model = Decoder(arch(max_len)).eval()
    code_dims = list(CODE_PAIRS) + [i + HEAD_DIM // 2 for i in CODE_PAIRS]
    assert NEEDLES <= len(code_dims)  # orthogonal codes need as many dims
    # scores are q . k / sqrt(head_dim): |code|^2 = sharpness * sqrt(head_dim)
    codes = torch.linalg.qr(torch.randn(len(code_dims), len(code_dims), generator=g))[0][:NEEDLES]
    codes = codes * (sharpness * HEAD_DIM ** 0.5) ** 0.5
    directions = torch.linalg.qr(torch.randn(HIDDEN, NEEDLES, generator=g))[0].T  # [NEEDLES, HIDDEN]
    embed = torch.randn(VOCAB, HIDDEN, generator=g)
    normed = embed / embed.pow(2).mean(-1, keepdim=True).add(model.arch.rms_norm_eps).sqrt()
    q, k, v = (torch.zeros(VOCAB, n) for n in (4 * HEAD_DIM, 2 * HEAD_DIM, 2 * HEAD_DIM))
    for m in range(NEEDLES):
        q[query(m), code_dims] = codes[m]  # head 0
        k[key(m), code_dims] = codes[m]  # kv head 0, which heads 0 and 1 read
        v[key(m), m] = 1.0
    others = [t for t in range(VOCAB) if not FILLERS <= t < FILLERS + NEEDLES]
    spread = torch.randn(len(others), len(code_dims), generator=g)
    k[torch.tensor(others)[:, None], torch.tensor(code_dims)] = spread / spread.norm(dim=1, keepdim=True) * (
        noise * codes.norm(dim=1).mean())
    solve = torch.linalg.pinv(normed)  # normed @ solve = identity: every token gets exactly its row
    o = torch.zeros(HIDDEN, 4 * HEAD_DIM)
    o[:, :NEEDLES] = directions.T * HIDDEN ** 0.5  # head 0's output, as large as an embedding
    lm_head = torch.zeros(VOCAB, HIDDEN)
    lm_head[[answer(m) for m in range(NEEDLES)]] = directions
    layer = model.model.layers[0]
    with torch.no_grad():
        model.model.embed_tokens.weight.copy_(embed)
        layer.self_attn.q_proj.weight.copy_((solve @ q).T)
        layer.self_attn.k_proj.weight.copy_((solve @ k).T)
        layer.self_attn.v_proj.weight.copy_((solve @ v).T)
        layer.self_attn.o_proj.weight.copy_(o)
        for p in layer.mlp.parameters():
            p.zero_()
        model.lm_head.weight.copy_(lm_head)
    return model


def haystack(length: int, probes: int, seed: int = 0) -> Haystack:
    """A document of random fillers with each key token once in its first quarter, and `probes`
    query/answer pairs spread over its second half (needles in turn)."""
    if length < 8 * max(probes, NEEDLES):
        raise ValueError(f"haystack: {length} tokens is too short for {probes} probes and {NEEDLES} needles")
    rng = random.Random(seed)
    ids = [rng.randrange(FILLERS) for _ in range(length)]
    for m, at in enumerate(rng.sample(range(length // 4), NEEDLES)):
        ids[at] = key(m)
    half = length // 2
    positions = [half + 1 + i * (half - 2) // probes for i in range(probes)]
    for i, p in enumerate(positions):
        ids[p - 1], ids[p] = query(i % NEEDLES), answer(i % NEEDLES)
    return Haystack(ids, positions)
