"""`RewardModelWorker`: a scalar reward model served in its own process, shared by every thread
that scores samples.

What it does: the process (spawned) loads `cfg.path` (`load_classifier`, one label, and the
folder's `tokenizer.json`), sets `torch.set_num_threads(cfg.threads)` and runs a `RewardScorer`.
Callers in any number of threads call `score(texts)`; the process gathers the requests of all of
them (dynamic batching) until the gathered texts hold `cfg.max_batch_tokens` tokens to run or
`cfg.max_wait_ms` has passed since the gather's first request (0: what is queued already),
runs them together (length buckets, cache hits served without the model) and answers each
caller; requests that arrive meanwhile queue for the next gather. Every call has a
deadline; a timeout, a dead process (with its exit code) or a text longer than the model's
context is a `RewardModelError` naming the model (an `InfrastructureError`: the sample's reward
fails, it is never a training signal). A request whose caller has given up is not run.
`load(path)` swaps the weights and bumps the version (the cache serves nothing older),
`stats()` reports counters, `close()` stops the process (killed after a deadline).

What it does not do: truncate texts, retry, restart a dead process (every later call fails, and
says why), reload the tokenizer on `load` (new weights, same tokenizer), or run on a GPU (the
config has no device key: CPU only).
"""

from __future__ import annotations

import concurrent.futures as cf
import itertools
import multiprocessing as mp
from multiprocessing.queues import Queue as ProcessQueue
import queue
import signal
import threading
import time
import traceback
from collections import Counter
from typing import Sequence, cast

import torch

from tempering.config import RewardModelConfig
from tempering.errors import UserError
from tempering.models import load_classifier
from tempering.reward.reward_model import RewardScorer, TextTooLong
from tempering.verdict import InfrastructureError
from tempering.tokenizer import load_tokenizer

START_TIMEOUT_S = 600.0  # spawning, importing torch and reading the weights (a big model is slow)
POLL_S = 0.1  # how soon a dead process is noticed while its replies are awaited
Request = tuple[str, int, float, object]  # (op, request id, deadline, its arguments)
Replies = list[tuple[int, bool, object]]  # one gather's (request id, ok, result or failure)
PARENT_POLL_S = 1.0  # how soon the process notices that its parent is gone, and exits
READY = 0  # the request id of the start-up reply


class RewardModelError(InfrastructureError):
    """The reward model could not score a request. `kind`: "timeout", "dead" (the process
    exited), "too_long" (a text longer than the model's context), "closed", "failed" (an
    exception in the process: its traceback is in the message)."""

    def __init__(self, model: str, kind: str, message: str):
        super().__init__(f"reward model {model}: {message}")
        self.model, self.kind, self.detail = model, kind, message


class RewardModelWorker:
    """The client of one reward-model process; thread-safe. Use as a context manager or `close()`."""

    def __init__(self, cfg: RewardModelConfig, name: str, start_timeout_s: float = START_TIMEOUT_S):
        self.cfg, self.name = cfg, name
        ctx = mp.get_context("spawn")
        self._requests, self._replies = ctx.Queue(), ctx.Queue()
        # Daemonic: it starts no processes of its own, and must not outlive an interpreter that
        # exits without close() (it also exits by itself when its parent is gone).
        self._process = ctx.Process(target=_serve, args=(cfg, self._requests, self._replies),
                                    name=f"reward-model-{name}", daemon=True)
        self._lock = threading.Lock()
        self._pending: dict[int, cf.Future] = {READY: cf.Future()}
        self._ids = itertools.count(READY + 1)
        self._gone: RewardModelError | None = None  # set once the process has exited or closed
        self._counts: Counter = Counter()
        ready = self._pending[READY]
        self._process.start()
        self._reader = threading.Thread(target=self._read, name=f"reward-model-{name}-replies", daemon=True)
        self._reader.start()
        try:
            self.version: int = ready.result(start_timeout_s)
        except cf.TimeoutError:
            self.close(timeout_s=0)
            raise self._error("timeout", f"did not start within {start_timeout_s:g} s") from None
        except UserError as e:
            self.close(timeout_s=0)
            raise UserError(f"reward.models.{name}: {e}") from None
        except BaseException:
            self.close(timeout_s=0)
            raise

    # ---- public ----

    def score(self, texts: Sequence[str]) -> list[float]:
        """The scores of `texts`, in order, within `cfg.timeout_s`; raises `RewardModelError`."""
        if not texts:
            return []
        return cast(list[float], self._call("score", list(texts), self.cfg.timeout_s))

    def load(self, path: str, timeout_s: float = START_TIMEOUT_S) -> int:
        """New weights from the folder `path` (the tokenizer stays); returns the new version.
        A folder that does not hold a one-label classifier is a `UserError`; the old weights stay."""
        self.version = cast(int, self._call("load", str(path), timeout_s))
        return self.version

    def stats(self) -> dict[str, float]:
        """Counters since the start (see `ScorerStats`), with `mean_batch_rows` (texts per forward
        pass), `mean_gather_requests` (requests per gather) and `timeouts` (calls given up here)."""
        out = cast(dict[str, float], self._call("stats", None, self.cfg.timeout_s))
        out["mean_batch_rows"] = out["misses"] / out["batches"] if out["batches"] else 0.0
        out["mean_gather_requests"] = out["requests"] / out["gathers"] if out["gathers"] else 0.0
        with self._lock:
            out["timeouts"] = self._counts["timeouts"]
        return out

    @property
    def pid(self) -> int | None:
        return self._process.pid

    def close(self, timeout_s: float = 10.0) -> None:
        """Stop the process: requests already sent are answered first; killed after `timeout_s`."""
        with self._lock:
            if self._gone is not None and self._gone.kind == "closed":
                return
            self._gone = self._error("closed", "closed")
        if self._process.is_alive():
            self._requests.put(("close", -1, 0.0, None))
            self._process.join(timeout_s)
        if self._process.is_alive():
            self._process.kill()  # it ignores SIGTERM, as every worker process does
            self._process.join(5)
        self._reader.join(5)
        self._fail_all(self._gone)
        self._requests.cancel_join_thread()  # no feeder thread may wait at exit for a process that is gone
        self._requests.close()
        self._replies.close()

    def __enter__(self) -> "RewardModelWorker":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- client side ----

    def _call(self, op: str, args: object, timeout_s: float) -> object:  # what the op gives back
        future: cf.Future = cf.Future()
        with self._lock:
            if self._gone is not None:
                raise self._error(self._gone.kind, self._gone.detail)
            rid = next(self._ids)
            self._pending[rid] = future
        deadline = time.monotonic() + timeout_s  # CLOCK_MONOTONIC: the process reads the same clock
        try:
            self._requests.put((op, rid, deadline, args))
        except ValueError:  # closed by close() since the check above
            raise self._error("closed", "closed") from None
        try:
            return future.result(timeout_s)
        except cf.TimeoutError:
            with self._lock:
                self._pending.pop(rid, None)  # a late reply is dropped
                self._counts["timeouts"] += 1
            raise self._error("timeout", f"no reply within {timeout_s:g} s (a {op} request)") from None

    def _read(self) -> None:
        """Replies to futures, until the process has exited and every reply it sent is read."""
        while True:
            # Looked at before reading: once it has exited, all it sent is in the pipe already,
            # so an empty read after that means that nothing more will come.
            exited = self._process.exitcode is not None
            try:
                replies = self._replies.get(timeout=POLL_S)  # a gather's replies come as one message
            except queue.Empty:
                if not exited:
                    continue
                died = self._error("dead", f"its process exited ({_exit(self._process.exitcode)})")
                with self._lock:
                    if self._gone is None:
                        self._gone = died
                self._fail_all(self._gone)
                return
            except (EOFError, OSError, ValueError):  # the queue was closed under us
                return
            with self._lock:
                answered = [(self._pending.pop(rid, None), ok, payload) for rid, ok, payload in replies]
            for future, ok, payload in answered:
                if future is None:
                    continue  # its caller gave up
                if ok:
                    future.set_result(payload)
                else:
                    kind, message = payload
                    future.set_exception(UserError(message) if kind == "user" else self._error(kind, message))

    def _fail_all(self, error: RewardModelError) -> None:
        with self._lock:
            pending, self._pending = self._pending, {}
        for future in pending.values():
            future.set_exception(self._error(error.kind, error.detail))  # one exception per caller

    def _error(self, kind: str, message: str) -> RewardModelError:
        return RewardModelError(self.name, kind, message)


def _exit(code: int) -> str:
    killed = code < 0 and -code in signal.valid_signals()
    return f"exit code {code}, killed by {signal.Signals(-code).name}" if killed else f"exit code {code}"


# ---- in the reward-model process ----

def _serve(cfg: RewardModelConfig, requests: ProcessQueue[Request], replies: ProcessQueue[Replies]) -> None:
    # The parent decides when this process ends (close, or by dying): a Ctrl-C to the process
    # group or a scheduler's SIGTERM must not kill it under a rollout that still scores.
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    torch.set_num_threads(cfg.threads)
    try:
        tokenizer = load_tokenizer(cfg.path)
        scorer = RewardScorer(_open(cfg.path, tokenizer.vocab_size), tokenizer, cfg.max_batch_tokens, cfg.cache_size)
    except BaseException as e:  # noqa: BLE001 - reported to the parent, which raises it
        replies.put([(READY, False, _failure(e))])
        return
    replies.put([(READY, True, scorer.version)])
    held = None  # a request that ended a gather; handled next
    parent = mp.parent_process()
    while True:
        msg = held if held is not None else _get(requests, PARENT_POLL_S)
        held = None
        if msg is None:
            if parent is not None and not parent.is_alive():
                return
        elif msg[0] == "score":
            held = _gather(scorer, cfg, msg, requests, replies)
        elif msg[0] == "close":
            return
        else:
            replies.put([_control(scorer, *msg)])


def _gather(scorer: RewardScorer, cfg: RewardModelConfig, first: Request, requests: ProcessQueue[Request],
            replies: ProcessQueue[Replies]) -> Request | None:
    """Gather score requests from `first` on, run them together, answer each. Returns the
    message that ended the gather when it is not a score request (handled after these)."""
    gather, answer = scorer.gather(), []
    until = time.monotonic() + cfg.max_wait_ms / 1000
    msg: tuple | None = first
    while msg is not None and msg[0] == "score":
        _, rid, deadline, texts = msg
        if time.monotonic() < deadline:
            gather.add(texts)
            answer.append(rid)
        else:
            scorer.stats.expired += 1  # its caller has given up: no work for nobody
        if gather.tokens >= cfg.max_batch_tokens:
            msg = None
            break
        msg = _get(requests, until - time.monotonic())
    try:
        results: list = gather.run()
    except Exception as e:  # noqa: BLE001 - these callers fail; the process keeps serving
        results = [e] * len(answer)
    replies.put([(rid, True, result) if isinstance(result, list) else (rid, False, _failure(result))
                 for rid, result in zip(answer, results)])
    return msg


def _control(scorer: RewardScorer, op: str, rid: int, deadline: float, args: object) -> tuple[int, bool, object]:
    try:
        if op == "stats":
            return rid, True, scorer.stats.as_dict()
        if op == "load":
            return rid, True, scorer.load(_open(args, scorer.tokenizer.vocab_size))
        raise ValueError(f"unknown request {op!r}")
    except Exception as e:  # noqa: BLE001 - reported to the caller
        return rid, False, _failure(e)


def _open(path: str, vocab: int):
    model = load_classifier(path, num_labels=1)
    if model.arch.vocab_size < vocab:
        raise UserError(f"{path}: the model's vocabulary has {model.arch.vocab_size} tokens, "
                        f"fewer than its tokenizer's {vocab}")
    return model


def _failure(e: BaseException) -> tuple[str, str]:
    if isinstance(e, UserError):
        return "user", str(e)
    if isinstance(e, TextTooLong):
        return "too_long", str(e)
    return "failed", "".join(traceback.format_exception(e)).rstrip()


def _get(requests: ProcessQueue[Request], timeout: float) -> Request | None:
    try:
        return requests.get(timeout=timeout) if timeout > 0 else requests.get_nowait()
    except queue.Empty:
        return None
