"""A tiny grader model folder for judge tests against a real `tempering serve`: a character
tokenizer and a one-layer decoder trained for a few seconds so that, after any chat prompt the
server renders, greedy decoding writes `REPLY` and then EOS.

The prompts it trains on go through the server's own request parsing (`api.parse`), so they end
exactly as the server's chat rendering ends (for a tokenizer without a chat template:
"role: content" lines, then "assistant: "). Half are judge prompts (`rubrics.messages`) of random
items under random criteria (and sometimes the built-in rubrics), half random text as a single
user message: the model learns to answer from the prompt's last characters, whatever comes
before and however long it is. Loss is on the reply (and its EOS) only, and only those few
positions' queries are computed (`_tail_attention`, exact for one layer), so 200 steps over
prompts of ~1000 tokens take a few seconds on one CPU thread.
"""

from __future__ import annotations

import random
import string
from pathlib import Path

import torch
import torch.nn.functional as F

from tempering.serve import api
from tempering.models import Arch, build_model, save_hf
from tempering.reward.rubrics import Rubric, get_rubric, messages
from tempering.verdict import JudgeItem
from tempering.tokenizer import char_tokenizer

REPLY = "SCORE: 7"
CONTEXT = 2048  # max_position_embeddings: a judge prompt with short criteria is ~850 characters
WORDS = ("the", "answer", "is", "correct", "grade", "SCORE:", "task", "strictly", "final", "reference", "score",
         "10", "7", "0", "only", "if", "it", "names", "city", "steps", "check", "every", "and", "or", "E:", "t:")


def chat_ids(tok, msgs: list[dict]) -> list[int]:
    """The prompt ids the server makes of a chat request's messages."""
    return api.parse({"messages": msgs}, True, tok).prompts[0]


def train_grader(folder: str | Path, steps: int = 200, batch: int = 8, lr: float = 1e-2, seed: int = 0) -> Path:
    """Train and save the grader (config.json, model.safetensors, tokenizer.json) into `folder`."""
    folder = Path(folder)
    tok = char_tokenizer(string.printable)
    target = tok.encode(REPLY) + [tok.eos_id]
    rng = random.Random(seed)

    def text(lo: int, hi: int) -> str:
        return "".join(rng.choice(string.printable) for _ in range(rng.randint(lo, hi)))

    def words(lo: int, hi: int) -> str:
        return " ".join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi))) + rng.choice(("", ".", "?"))

    def prompt() -> list[int]:
        if rng.random() < 0.5:
            item = JudgeItem(text(0, 60), answer=text(0, 40), reference=text(0, 10) if rng.random() < 0.3 else None)
            u = rng.random()
            rubric = (get_rubric(rng.choice(("outcome", "process"))) if u < 0.1 else
                      Rubric("custom", words(1, 30) if u < 0.55 else text(1, 150)))
            return chat_ids(tok, messages(rubric, item))
        return chat_ids(tok, [{"role": "user", "content": words(0, 100) if rng.random() < 0.3 else text(0, 600)}])

    arch = Arch(vocab_size=tok.vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=CONTEXT,
                eos_token_id=tok.eos_id, pad_token_id=tok.pad_id)
    torch.manual_seed(seed)
    model = build_model(arch, seed=seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    decay = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1.0 - step / steps)
    tail = len(target)  # the positions whose next token is the reply's: the last ones (left padding)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for _ in range(steps):
            prompts = [prompt() for _ in range(batch)]
            width = max(map(len, prompts)) + tail - 1
            x = torch.full((batch, width), tok.pad_id)
            pad = torch.tensor([width - len(p) - tail + 1 for p in prompts])
            for i, p in enumerate(prompts):
                x[i, pad[i]:] = torch.tensor(p + target[:-1])
            positions = (torch.arange(width) - pad[:, None]).clamp(min=0)
            logits = model(x, positions, _tail_attention(pad, tail))[:, -tail:]
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), torch.tensor(target).repeat(batch))
            opt.zero_grad()
            loss.backward()
            opt.step()
            decay.step()
    finally:
        torch.set_num_threads(threads)
    model.eval()
    save_hf(model, folder)
    tok.save(folder)
    return folder


def _tail_attention(pad: torch.Tensor, tail: int):
    """Causal attention (left padding masked) for the last `tail` queries only, zeros elsewhere:
    in a one-layer model the logits there are exactly the full model's, and no other position
    has a loss, so a step costs O(T) instead of O(T^2): long prompts train in seconds."""

    def attention(layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        b, h, t, d = q.shape
        keys = torch.arange(t)
        queries = torch.arange(t - tail, t)
        allowed = (keys[None, None, :] >= pad[:, None, None]) & (keys[None, None, :] <= queries[None, :, None])
        scores = (q[:, :, -tail:] @ k.transpose(-1, -2)) / d ** 0.5
        out = scores.masked_fill(~allowed[:, None], float("-inf")).softmax(-1) @ v
        return torch.cat([q.new_zeros(b, h, t - tail, d), out], dim=2)

    return attention
