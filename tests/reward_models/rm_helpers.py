"""Tiny reward-model folders (a locally built tokenizer, a random classifier) and mixed-length
texts, for the reward-model tests."""

from __future__ import annotations

import random
from pathlib import Path

from tokenizer_builders import CORPUS, LLAMA3_CONFIG, QWEN2_CONFIG, llama3_style, qwen2_style, write_folder

from tempering.models import Arch, build_classifier, save_classifier
from tempering.tokenizer import load_tokenizer

WORDS = sorted({w for line in CORPUS for w in line.split()})
PADS = {"llama": "<|end_of_text|>", "qwen2": "<|endoftext|>"}


def tokenizer_folder(path: Path, model_type: str = "llama") -> Path:
    """A Llama-3-style tokenizer (its post-processor adds BOS) or a Qwen2-style one (no BOS)."""
    inner, config = (llama3_style(), LLAMA3_CONFIG) if model_type == "llama" else (qwen2_style(), QWEN2_CONFIG)
    return write_folder(path, inner, config)


def tiny_arch(vocab_size: int, model_type: str = "llama", pad_token_id: int | None = None, context: int = 128) -> Arch:
    return Arch(vocab_size=vocab_size, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=context,
                model_type=model_type, pad_token_id=pad_token_id)


def rm_folder(path: Path, model_type: str = "llama", seed: int = 0, context: int = 128) -> Path:
    """A one-label reward model with its tokenizer, padded by a token of its own (not eos)."""
    tokenizer_folder(path, model_type)
    tok = load_tokenizer(path)
    pad = tok.inner.token_to_id(PADS[model_type])
    save_classifier(build_classifier(tiny_arch(tok.vocab_size, model_type, pad, context), 1, seed), path)
    return path


def texts(n: int, seed: int = 0, max_words: int = 40) -> list[str]:
    """Distinct texts of 1..max_words words (about as many tokens, BOS aside)."""
    rng = random.Random(seed)
    out: dict[str, None] = {}
    while len(out) < n:
        out[" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, max_words)))] = None
    return list(out)
