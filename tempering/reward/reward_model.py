"""Scoring texts with a reward model in this process: tokenize, cache, length-bucket, pad, run.

`RewardScorer` is what the reward-model worker (`rm_worker`) runs in its own process; texts are
plain strings (`render_text` makes one from a prompt and a completion as `tempering train-rm`
trains on it). Tokens are the RM tokenizer's, as a plain prompt is encoded. A text longer than
the context is refused (`TextTooLong`), never truncated. Rows are sorted by length and cut into
batches within `max_batch_tokens` and a bound on padding; each row is scored at its own last
token, so a score does not depend on its batch. An LRU cache keyed by (text, model version) is
emptied by `load`. `gather()` collects several requests so their texts run together; a request
with a text too long is refused alone."""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import asdict, dataclass
from typing import Hashable, Sequence

import torch

from tempering.models import SequenceClassifier
from tempering.records import Message
from tempering.tokenizer import Tokenizer

PAD_WASTE = 0.25  # most of a batch's padded tokens that may be padding before it is cut
# below this many padded tokens a batch is not cut for its padding: a forward pass's fixed cost
# (Python, one kernel per op) outweighs the padding a cut would save (measured on CPU: 16 short
# texts in one pass run 2.7x faster than one by one, cut in three they lose most of that)
MIN_PAD_CUT = 1024


class TextTooLong(ValueError):
    """A text has more tokens than the reward model's context; it is not scored."""


def render_text(tokenizer: Tokenizer, prompt: str, completion: str) -> str:
    """The text a reward model scores for `completion` to `prompt`: the tokenizer's chat template
    over a user and an assistant turn when it has one, else the plain concatenation (the demo's
    format: "sort 4721=" + "1247")."""
    if tokenizer.chat_template:
        return tokenizer.render_chat([Message("user", prompt), Message("assistant", completion)],
                                     add_generation_prompt=False)
    return prompt + completion


def length_buckets(lengths: Sequence[int], max_batch_tokens: int, pad_waste: float = PAD_WASTE,
                   min_pad_cut: int = MIN_PAD_CUT) -> list[list[int]]:
    """Indices of rows grouped into batches of similar length: ascending length, cut when the
    batch's padded size (rows x longest) would exceed `max_batch_tokens`, or its padding would
    exceed `pad_waste` of a padded size over `min_pad_cut`."""
    batches: list[list[int]] = []
    current: list[int] = []
    real = 0
    for i in sorted(range(len(lengths)), key=lambda i: lengths[i]):
        n = lengths[i]
        padded = n * (len(current) + 1)  # ascending: this row is the longest
        wasteful = padded > min_pad_cut and padded - (real + n) > pad_waste * padded
        if current and (padded > max_batch_tokens or wasteful):
            batches.append(current)
            current, real = [], 0
        current.append(i)
        real += n
    if current:
        batches.append(current)
    return batches


def last_real(row: Sequence[int], pad_token_id: int | None) -> int:
    """`last_token_index` of one row alone, in Python: where transformers scores it (its rightmost
    token that is not the pad id, 0 for a row of pads; its last token without a pad id)."""
    if pad_token_id is not None:
        for i in range(len(row) - 1, -1, -1):
            if row[i] != pad_token_id:
                return i
        return 0
    return len(row) - 1


class ScoreCache:
    """LRU of scores keyed by (text, model version); `capacity` 0 keeps nothing."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self._items: OrderedDict[Hashable, float] = OrderedDict()

    def get(self, key: Hashable) -> float | None:
        value = self._items.get(key)
        if value is not None:
            self._items.move_to_end(key)
        return value

    def put(self, key: Hashable, value: float) -> None:
        if self.capacity <= 0:
            return
        self._items[key] = value
        self._items.move_to_end(key)
        while len(self._items) > self.capacity:
            self._items.popitem(last=False)

    def __len__(self) -> int:
        return len(self._items)


@dataclass
class ScorerStats:
    hits: int = 0  # texts served without running the model: cached, or a repeat within one gather
    misses: int = 0  # texts the model ran on
    batches: int = 0  # forward passes
    tokens: int = 0  # real tokens run
    padded_tokens: int = 0  # tokens run including padding
    refused: int = 0  # texts refused as too long
    version: int = 0  # the model version scores are computed with
    cached: int = 0  # entries in the cache now
    requests: int = 0  # requests scored (a refused one is counted in `refused` only)
    gathers: int = 0  # gathers run (each one or more forward passes, or none when all were hits)
    expired: int = 0  # requests not run because their caller's deadline had passed (worker)
    forward_s: float = 0.0  # seconds in forward passes

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


class RewardScorer:
    def __init__(self, model: SequenceClassifier, tokenizer: Tokenizer, max_batch_tokens: int = 8192,
                 cache_size: int = 100_000, max_len: int = 0, device: str | torch.device = "cpu"):
        if model.num_labels != 1:
            raise ValueError(f"a reward model has one label (a scalar score), this one has {model.num_labels}")
        self.model = model.eval().to(device)
        self.tokenizer = tokenizer
        self.device = torch.device(device)
        self.max_batch_tokens = max_batch_tokens
        context = model.arch.max_position_embeddings
        self.max_len = min(max_len, context) if max_len > 0 else context
        self.cache = ScoreCache(cache_size)
        self.stats = ScorerStats()
        pad = model.arch.pad_token_id
        self.pad_id = pad if pad is not None else 0  # pad value of right padding (never scored)

    @property
    def version(self) -> int:
        return self.stats.version

    def load(self, model: SequenceClassifier) -> int:
        """New weights (same tokenizer): the version goes up, so the cache serves none of the old
        scores; they are dropped, since they can never be served again."""
        if model.num_labels != 1:
            raise ValueError(f"a reward model has one label, this one has {model.num_labels}")
        self.model = model.eval().to(self.device)
        self.stats.version += 1
        self.cache = ScoreCache(self.cache.capacity)
        self.stats.cached = 0
        return self.stats.version

    def cached(self, text: str) -> float | None:
        """The cached score of `text` under the current version (not counted), or None."""
        return self.cache.get((text, self.stats.version))

    def encode(self, text: str) -> list[int]:
        ids = self.tokenizer.encode_prompt(text)
        if len(ids) > self.max_len:
            self.stats.refused += 1
            raise TextTooLong(f"a text of {len(ids)} tokens is longer than the reward model's context "
                              f"of {self.max_len} tokens (texts are refused, not truncated): {text[:60]!r}...")
        if not ids:
            ids = [self.pad_id]  # an empty text (no BOS) scores at position 0, as transformers would
        return ids

    def remember(self, text: str, score: float) -> None:
        self.cache.put((text, self.stats.version), score)
        self.stats.cached = len(self.cache)

    @torch.inference_mode()
    def score_ids(self, rows: Sequence[Sequence[int]]) -> list[float]:
        """Scores of token rows, run in length buckets (no cache; counted as misses)."""
        out = [0.0] * len(rows)
        pad = self.model.arch.pad_token_id
        for batch in length_buckets([len(r) for r in rows], self.max_batch_tokens):
            width = max(len(rows[i]) for i in batch)
            # Built in Python, one tensor each: per-row tensor ops cost more than a tiny model's forward.
            ids = torch.tensor([list(rows[i]) + [self.pad_id] * (width - len(rows[i])) for i in batch])
            last = torch.tensor([last_real(rows[i], pad) for i in batch])
            start = time.perf_counter()
            scores = self.model(ids.to(self.device), last.to(self.device))[:, 0].tolist()  # syncs
            self.stats.forward_s += time.perf_counter() - start
            for j, i in enumerate(batch):
                out[i] = scores[j]
            self.stats.batches += 1
            self.stats.tokens += sum(len(rows[i]) for i in batch)
            self.stats.padded_tokens += width * len(batch)
        self.stats.misses += len(rows)
        return out

    def gather(self) -> "Gather":
        """An empty gather of requests to run together."""
        return Gather(self)

    def score(self, texts: Sequence[str]) -> list[float]:
        """Scores of `texts`, in order: cached ones served, repeats run once, the rest in buckets.
        Raises `TextTooLong` (nothing scored) if any text is too long."""
        gather = self.gather()
        gather.add(texts)
        (out,) = gather.run()
        if isinstance(out, TextTooLong):
            raise out
        return out


class Gather:
    """Requests collected to run together. Each request's cache hits are looked up as it is
    added (under the version of that moment) and its other texts encoded; a text asked for by
    several requests becomes one row. `tokens`: the real tokens the model will run so far (the
    padding that length bucketing adds stays under `PAD_WASTE` of a batch)."""

    def __init__(self, scorer: RewardScorer):
        self.scorer = scorer
        self.rows: list[list[int]] = []
        self.row_of: dict[str, int] = {}  # text -> its row
        # per request: for each text, its score (a hit) or the text itself (a row); or its refusal
        self.plans: list[list[float | str] | TextTooLong] = []
        self.tokens = 0

    def add(self, texts: Sequence[str]) -> None:
        """Add one request; a request with a text too long adds no rows and will be refused."""
        s = self.scorer
        plan: list[float | str] = []
        new: dict[str, list[int]] = {}
        hits = 0
        for text in texts:
            if text in self.row_of or text in new:
                hits += 1
            elif (value := s.cached(text)) is not None:
                hits += 1
                plan.append(value)
                continue
            else:
                try:
                    new[text] = s.encode(text)
                except TextTooLong as e:
                    self.plans.append(e)
                    return
            plan.append(text)
        for text, ids in new.items():
            self.row_of[text] = len(self.rows)
            self.rows.append(ids)
            self.tokens += len(ids)
        s.stats.hits += hits
        s.stats.requests += 1
        self.plans.append(plan)

    def run(self) -> list[list[float] | TextTooLong]:
        """Each request's scores in order, or its `TextTooLong`; the new scores are cached."""
        s = self.scorer
        scores = s.score_ids(self.rows) if self.rows else []
        for text, row in self.row_of.items():
            s.remember(text, scores[row])
        s.stats.gathers += 1
        return [plan if isinstance(plan, TextTooLong) else
                [x if isinstance(x, float) else scores[self.row_of[x]] for x in plan] for plan in self.plans]
