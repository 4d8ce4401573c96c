"""A scripted policy: a real decoder whose weights make it say given text, for tests and
benchmarks of what runs around a model (serving, tool calls, agent runs).

`scripted_policy(chains)` builds a character tokenizer in which every multi-character piece of
the chains is one token of its own, and a one-layer Llama-style `Decoder` whose next token is a
fixed function of the current one: each chain `[trigger, piece, piece, ...]` makes the model
answer the token `trigger` with the first piece, each piece with the next, the last with eos;
any other token is answered with eos. The layers add nothing to the residual stream (their
output projections are zero), embeddings are one-hot and the head maps each token to its
successor with a margin of about 45 logits, so the script holds at any temperature up to about
3. It runs on the ordinary engine like any model: only its weights are chosen. It is not a
language model of anything, and it says nothing it was not told to.
"""

from __future__ import annotations

import math
import string
from typing import Sequence

import torch
from tokenizers import AddedToken, Regex, Tokenizer as HFTokenizer, decoders, models, pre_tokenizers

from tempering.models.arch import Arch
from tempering.models.checkpoint import build_model
from tempering.models.decoder import Decoder
from tempering.tokenizer import SPECIALS, Tokenizer

MARGIN = 4.0  # the successor's logit before the norm's sqrt(hidden) scale


def scripted_tokenizer(pieces: Sequence[str], alphabet: str = string.printable, specials: Sequence[str] = (),
                       eos: str = "<eos>", chat_template: str | None = None) -> Tokenizer:
    """One token per character of `alphabet`, per special (SPECIALS and `specials`, skipped when
    decoding), and per multi-character piece (matched before characters, longest first)."""
    vocab = {tok: i for i, tok in enumerate(SPECIALS)}
    for c in sorted(set(alphabet)):
        vocab.setdefault(c, len(vocab))
    inner = HFTokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    inner.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    inner.decoder = decoders.Fuse()
    inner.add_special_tokens([*SPECIALS, *specials])
    inner.add_tokens([AddedToken(p, normalized=False, special=False) for p in dict.fromkeys(pieces) if len(p) > 1])
    return Tokenizer(inner, eos_token=eos, pad_token="<pad>", bos_token="<bos>", chat_template=chat_template)


def scripted_model(tokenizer: Tokenizer, successors: dict[int, int], max_positions: int = 8192) -> Decoder:
    """The decoder whose greedy (and, by the margin, sampled) next token after token t is
    `successors[t]`, and eos after any other token."""
    vocab = tokenizer.vocab_size
    hidden = 4 * math.ceil(vocab / 4)  # one-hot embeddings; two heads of an even size (rotary)
    arch = Arch(vocab_size=vocab, hidden_size=hidden, intermediate_size=8, num_hidden_layers=1,
                num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=max_positions,
                tie_word_embeddings=False)
    model = build_model(arch, seed=0)
    state = model.state_dict()
    with torch.no_grad():
        for name, tensor in state.items():
            if name.endswith(("o_proj.weight", "down_proj.weight", "lm_head.weight", "embed_tokens.weight")):
                tensor.zero_()
            elif name.endswith("norm.weight"):
                tensor.fill_(1.0)
        state["model.embed_tokens.weight"][:, :vocab] = torch.eye(vocab)
        head = state["lm_head.weight"]
        for t in range(vocab):
            head[successors.get(t, tokenizer.eos_id), t] = MARGIN
    return model.eval()


def scripted_policy(chains: Sequence[Sequence[str]], alphabet: str = string.printable, specials: Sequence[str] = (),
                    eos: str = "<eos>", chat_template: str | None = None) -> tuple[Decoder, Tokenizer]:
    """A model that answers each chain's trigger with the rest of the chain, then eos.
    ValueError when one token would need two successors."""
    tok = scripted_tokenizer([p for chain in chains for p in chain], alphabet, specials, eos, chat_template)
    successors: dict[int, int] = {}
    for chain in chains:
        ids = [_one_token(tok, p) for p in chain]
        for a, b in zip(ids, ids[1:]):
            if successors.get(a, b) != b:
                raise ValueError(f"scripted_policy: {tok.token(a)!r} would be followed by two different pieces")
            successors[a] = b
    return scripted_model(tok, successors), tok


def _one_token(tok: Tokenizer, piece: str) -> int:
    ids = tok.encode(piece)
    if len(ids) != 1:
        raise ValueError(f"scripted_policy: {piece!r} is {len(ids)} tokens, not one")
    return ids[0]
