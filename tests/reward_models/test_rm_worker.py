"""The reward-model worker: scores from its batched path (many texts of mixed lengths from several
threads at once, gathered and length-bucketed) equal transformers' scores of each text alone (its
own tokenizer, its own model, one row at a time); cache hits are served without forward passes;
`load` bumps the version and no old score is served; a text too long, a stopped process (timeout)
and a killed one (dead) are `RewardModelError`s naming the model, promptly; a bad folder is a
`UserError` naming it. Plus the in-process scorer's buckets and refusals."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest
import torch
from rm_helpers import rm_folder, texts

from tempering.config import RewardModelConfig
from tempering.errors import UserError
from tempering.models import last_token_index, load_classifier
from tempering.records import Message
from tempering.reward.reward_model import (MIN_PAD_CUT, PAD_WASTE, RewardScorer, TextTooLong, last_real, length_buckets,
                                           render_text)
from tempering.reward.rm_worker import RewardModelError, RewardModelWorker
from tempering.tokenizer import load_tokenizer

transformers = pytest.importorskip("transformers")
ATOL = 1e-5


def reference(folder, batch: list[str]) -> list[float]:
    """transformers' score of each text alone: AutoTokenizer ids, AutoModelForSequenceClassification."""
    tok = transformers.AutoTokenizer.from_pretrained(str(folder))
    model = transformers.AutoModelForSequenceClassification.from_pretrained(str(folder)).eval()
    with torch.no_grad():
        return [model(input_ids=torch.tensor([tok(t).input_ids])).logits[0, 0].item() for t in batch]


def in_threads(worker: RewardModelWorker, requests: list[list[str]], threads: int) -> list[list[float]]:
    """Each request scored by one of `threads` threads, all started together."""
    out: list = [None] * len(requests)
    start = threading.Barrier(threads)

    def run(k: int) -> None:
        start.wait()
        for i in range(k, len(requests), threads):
            try:
                out[i] = worker.score(requests[i])
            except Exception as e:  # noqa: BLE001 - checked by the caller
                out[i] = e

    pool = [threading.Thread(target=run, args=(k,)) for k in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join(60)
    return out


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("rm")
    return rm_folder(root / "a", seed=0), rm_folder(root / "b", seed=1)


@pytest.fixture(scope="module")
def worker(folders):
    # max_wait_ms long enough that requests from several threads gather; a budget a gather fills
    cfg = RewardModelConfig(path=str(folders[0]), max_batch_tokens=1024, max_wait_ms=20, cache_size=1000)
    with RewardModelWorker(cfg, "tiny") as w:
        yield w


def test_batched_scores_equal_each_text_scored_alone_by_transformers(worker, folders):
    batch = texts(96, seed=1)
    requests = [batch[i: i + n] for i, n in zip(range(0, 96, 3), [1, 2, 3, 4, 5] * 20)]  # overlapping sizes
    before = worker.stats()
    got = in_threads(worker, requests, threads=8)
    expected = dict(zip(batch, reference(folders[0], batch)))
    for request, scores in zip(requests, got):
        assert isinstance(scores, list), scores
        assert scores == pytest.approx([expected[t] for t in request], abs=ATOL, rel=0)
    stats = worker.stats()
    assert stats["requests"] - before["requests"] == len(requests)
    # it did batch: requests gathered together, several texts per forward pass, bounded padding
    assert stats["gathers"] - before["gathers"] < len(requests)
    assert stats["mean_batch_rows"] > 2
    batches = stats["batches"] - before["batches"]
    assert stats["padded_tokens"] <= stats["tokens"] / (1 - PAD_WASTE) + batches * MIN_PAD_CUT


def test_cache_hits_are_served_without_the_model(worker):
    batch = texts(10, seed=2)
    first = worker.score(batch)
    before = worker.stats()
    again = worker.score(batch[::-1] + batch[:3])
    after = worker.stats()
    assert again == first[::-1] + first[:3]
    assert after["hits"] - before["hits"] == 13
    assert (after["batches"], after["misses"], after["forward_s"]) == (before["batches"], before["misses"],
                                                                      before["forward_s"])


def test_load_bumps_the_version_and_old_scores_are_not_served(worker, folders):
    batch = texts(6, seed=3)
    old = worker.score(batch)
    version = worker.stats()["version"]
    assert worker.load(str(folders[1])) == version + 1
    before = worker.stats()
    assert before["cached"] == 0
    new = worker.score(batch)
    assert worker.stats()["misses"] - before["misses"] == len(batch)  # all ran again
    assert new == pytest.approx(reference(folders[1], batch), abs=ATOL, rel=0)
    assert max(abs(a - b) for a, b in zip(old, new)) > 1e-3
    with pytest.raises(UserError, match="nowhere.*no config.json"):
        worker.load(str(folders[1].parent / "nowhere"))
    assert worker.stats()["version"] == version + 1 and worker.score(batch) == new  # still the new weights
    worker.load(str(folders[0]))


def test_a_text_too_long_fails_its_request_only(worker):
    long = " ".join(["hello world"] * 200)  # far over the 128-token context
    got = in_threads(worker, [["fine text", long], ["hello"], ["the quick brown fox"]], threads=3)
    assert isinstance(got[0], RewardModelError) and got[0].kind == "too_long"
    assert "reward model tiny" in str(got[0]) and "longer than the reward model's context of 128" in str(got[0])
    assert all(isinstance(g, list) and len(g) == 1 for g in got[1:])
    assert worker.score(["fine text"]) == pytest.approx(worker.score(["fine text"]))


def test_timeouts_and_a_killed_process_fail_promptly(folders):
    cfg = RewardModelConfig(path=str(folders[0]), timeout_s=1.5, max_wait_ms=0)
    worker = RewardModelWorker(cfg, "fragile")
    try:
        assert len(worker.score(["hello"])) == 1
        os.kill(worker.pid, signal.SIGSTOP)  # alive, but answers nothing
        start = time.monotonic()
        with pytest.raises(RewardModelError, match="reward model fragile: no reply within 1.5 s") as e:
            worker.score(["hello world"])
        assert e.value.kind == "timeout" and time.monotonic() - start >= 1.4  # it waited its deadline out
        os.kill(worker.pid, signal.SIGCONT)
        assert len(worker.score(["rev abc"])) == 1
        stats = worker.stats()
        assert stats["expired"] == 1 and stats["timeouts"] == 1  # the abandoned request was not run

        os.kill(worker.pid, signal.SIGSTOP)
        result: list = []
        caller = threading.Thread(target=lambda: result.append(_outcome(worker, ["sort 4721="])))
        caller.start()
        time.sleep(0.2)
        os.kill(worker.pid, signal.SIGKILL)  # a request is in flight
        caller.join(60)
        # "dead", not "timeout": the death is noticed, not waited out as a silence
        assert isinstance(result[0], RewardModelError) and result[0].kind == "dead"
        assert "reward model fragile: its process exited (exit code -9, killed by SIGKILL)" in str(result[0])
        with pytest.raises(RewardModelError, match="fragile.*exit code -9"):
            worker.score(["hello"])
    finally:
        worker.close()
    with pytest.raises(RewardModelError, match="closed"):
        worker.score(["hello"])


def _outcome(worker, batch):
    try:
        return worker.score(batch)
    except Exception as e:  # noqa: BLE001
        return e


def test_a_bad_folder_is_a_user_error_naming_it(tmp_path, folders):
    (tmp_path / "tokenizer.json").write_bytes((folders[0] / "tokenizer.json").read_bytes())
    start = time.monotonic()
    with pytest.raises(UserError, match=rf"reward.models.broken: {tmp_path}: not a model folder \(no config.json\)"):
        RewardModelWorker(RewardModelConfig(path=str(tmp_path)), "broken")
    assert time.monotonic() - start < 30


# ---- the in-process scorer ----

def test_buckets_keep_the_budget_and_the_padding_bound():
    lengths = [1, 3, 7, 8, 9, 30, 31, 33, 60, 64, 200, 2, 5]
    for min_pad_cut in (0, 60):
        buckets = length_buckets(lengths, 100, min_pad_cut=min_pad_cut)
        assert sorted(i for b in buckets for i in b) == list(range(len(lengths)))
        for b in buckets:
            width, real = max(lengths[i] for i in b), sum(lengths[i] for i in b)
            padded = width * len(b)
            assert len(b) == 1 or (padded <= 100 and (padded <= min_pad_cut or padded - real <= PAD_WASTE * padded))
        assert [200] in [[lengths[i] for i in b] for b in buckets]  # a row alone may exceed the budget
    # small batches are not cut for their padding: [1, 2, 3, 5, 7, 8, 9] in one pass of 63 tokens
    assert [sorted(lengths[i] for i in b) for b in length_buckets(lengths, 100, min_pad_cut=64)][0] == [1, 2, 3, 5, 7, 8, 9]


def test_each_row_is_scored_where_transformers_scores_it():
    gen = torch.Generator().manual_seed(0)
    rows = [torch.randint(0, 3, (n,), generator=gen).tolist() for n in (1, 2, 5, 9, 9, 30)] + [[0, 0, 0], [1, 0, 0]]
    for pad in (0, None):
        for row in rows:
            assert last_real(row, pad) == last_token_index(torch.tensor([row]), pad).item(), (row, pad)


def test_scorer_refuses_a_request_with_a_text_too_long_and_scores_the_others(folders):
    tok = load_tokenizer(folders[0])
    scorer = RewardScorer(load_classifier(folders[0]), tok, max_batch_tokens=256, cache_size=0)
    with pytest.raises(TextTooLong, match="refused, not truncated"):
        scorer.score(["hello", "hello " * 200])
    gather = scorer.gather()
    gather.add(["hello", "hello " * 200])
    gather.add(["hello", "hello", "rev abc"])
    refused, scores = gather.run()
    assert isinstance(refused, TextTooLong) and scores[0] == scores[1]
    assert (scorer.stats.misses, scorer.stats.hits, scorer.stats.refused) == (2, 1, 2)
    assert scores == pytest.approx(reference(folders[0], ["hello", "hello", "rev abc"]), abs=ATOL, rel=0)


def test_render_text_uses_the_chat_template_when_there_is_one(folders):
    tok = load_tokenizer(folders[0])
    text = render_text(tok, "sort 4721=", "1247")
    assert text == tok.render_chat([Message("user", "sort 4721="), Message("assistant", "1247")],
                                   add_generation_prompt=False)
    assert text.count("<|begin_of_text|>") == 1 and tok.encode_prompt(text).count(tok.bos_id) == 1
    tok.chat_template = None
    assert render_text(tok, "sort 4721=", "1247") == "sort 4721=1247"
