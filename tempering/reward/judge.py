"""Judges: a language model grades samples by a rubric, over any OpenAI-compatible endpoint
(`/v1/chat/completions`; `tempering serve` is one).

`Judge(JudgeConfig(...))` sends many items at once: up to `max_in_flight` requests in flight (that
many worker threads, each holding one keep-alive HTTP connection: the standard library's
`http.client`, nothing else), whoever calls it and from however many threads. Each request has a
deadline (`timeout_s`: a watchdog closes the connection of a request that runs past it, so even an
endpoint that trickles bytes cannot hold it longer) and is retried with backoff on connection
errors, timeouts, 429 and 5xx, never on another 4xx. A reply is read by the rubric's strict parser
(`tempering.reward.rubrics`). Whatever goes wrong (no reply within the retries, a refused request,
a reply the parser cannot read) is a `JudgeError`, an `InfrastructureError`: it says nothing
about the sample and is never a training signal.

Parsed results are cached (LRU, `cache_size` entries) by everything that determines the reply:
the endpoint, the model, the sampling settings and the prompt (rubric and item); an item asked for
while the same prompt is in flight waits for that request instead of sending its own. Failures
are not cached.
"""

from __future__ import annotations

import concurrent.futures as cf
import hashlib
import heapq
import http.client
import itertools
import json
import os
import random
import socket
import threading
import time
from collections import Counter, OrderedDict
from dataclasses import dataclass
from typing import Sequence
from urllib.parse import urlsplit

from tempering.config import JudgeConfig
from tempering.errors import UserError
from tempering.reward.rubrics import DOMAIN_RUBRIC, Rubric, UnreadableReply, get_rubric, messages, parse_score
from tempering.verdict import InfrastructureError, JudgeItem

__all__ = ["Judge", "JudgeConfig", "worst_case_s", "JudgeItem", "JudgeResult", "JudgeError", "JudgeCache"]

MAX_BACKOFF_S = 8.0


class JudgeError(InfrastructureError):
    """The judge could not grade the item. `kind`: "parse" (the reply has no readable score),
    "http" (a refused request, or 429/5xx until the retries ran out), "timeout" (past the
    deadline on every attempt), "connection", "response" (a 200 whose body is not a chat
    completion), "closed" (the judge was closed). `reply` is the judge model's text when
    there was one; `attempts` the requests made."""

    def __init__(self, kind: str, message: str, *, status: int | None = None, reply: str = "", attempts: int = 0):
        super().__init__(message)
        self.kind, self.status, self.reply, self.attempts = kind, status, reply, attempts


def worst_case_s(cfg: JudgeConfig) -> float:
    """The longest one item can take once its first request starts (every attempt to its
    deadline, every backoff at its longest): keep it under the reward service's deadline."""
    return (cfg.retries + 1) * cfg.timeout_s + sum(_backoff(cfg.backoff_s, a) for a in range(1, cfg.retries + 1))


def _backoff(base: float, attempt: int) -> float:
    """The longest wait before retry number `attempt` (1-based)."""
    return min(base * 2 ** (attempt - 1), MAX_BACKOFF_S)


@dataclass(frozen=True)
class JudgeResult:
    """`score` in [0, 1], or `error` (and score None). `cached`: served without a request of its
    own (from the cache, or by an identical request in flight); `attempts`: requests made;
    `seconds`: from its first request to its result."""

    score: float | None
    reply: str = ""
    error: JudgeError | None = None
    cached: bool = False
    attempts: int = 0
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error is None

    def value(self) -> float:
        """The score; raises the `JudgeError` when there is none."""
        if self.error is not None:
            raise self.error
        return self.score  # type: ignore[return-value]


class JudgeCache:
    """A thread-safe LRU of parsed results (score, reply) by key; may be shared by judges."""

    def __init__(self, size: int):
        self.size = size
        self._items: OrderedDict[str, tuple[float, str]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str) -> tuple[float, str] | None:
        with self._lock:
            hit = self._items.get(key)
            if hit is not None:
                self._items.move_to_end(key)
            return hit

    def put(self, key: str, value: tuple[float, str]) -> None:
        if self.size <= 0:
            return
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self.size:
                self._items.popitem(last=False)

    def __len__(self) -> int:
        return len(self._items)


@dataclass(frozen=True)
class _Reply:
    score: float
    reply: str
    attempts: int
    seconds: float


class Judge:
    """Grades items by `spec.rubric` on `spec.base_url`. Thread-safe; `close()` when done."""

    def __init__(self, spec: JudgeConfig, cache: JudgeCache | None = None):
        self.spec = spec
        # "domain": each item is graded by the criteria its caller passes (its domain's rubric)
        self.rubric: Rubric | None = None if spec.rubric.strip() == DOMAIN_RUBRIC else get_rubric(spec.rubric)
        self.cache = cache if cache is not None else JudgeCache(spec.cache_size)
        url = urlsplit(spec.base_url)
        self._https = url.scheme == "https"
        self._host, self._port = url.hostname, url.port
        self._path = url.path.rstrip("/") + "/chat/completions"
        self._headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if spec.api_key_env:
            key = os.environ.get(spec.api_key_env)
            if not key:
                raise UserError(f"judge api_key_env: the environment variable {spec.api_key_env} is not set")
            self._headers["Authorization"] = f"Bearer {key}"
        self._pool = cf.ThreadPoolExecutor(spec.max_in_flight, thread_name_prefix="judge")
        self._local = threading.local()
        self._connections: set[http.client.HTTPConnection] = set()
        self._pending: dict[str, cf.Future] = {}
        self._lock = threading.Lock()
        self._watchdog = _Watchdog()
        self._closed = False
        self._counts: Counter = Counter()

    # ---- public ----

    def judge(self, items: Sequence[JudgeItem], rubric: Rubric | None = None) -> list[JudgeResult]:
        """The result of each item, in order, all of them in flight together (up to
        `max_in_flight` requests). Failures are results with `error` set; this does not raise them."""
        futures = [self.submit(item, rubric) for item in items]
        return [f.result() for f in futures]

    def score(self, item: JudgeItem) -> float:
        """One item's score in [0, 1]; raises `JudgeError` (an InfrastructureError)."""
        return self.submit(item).result().value()

    def submit(self, item: JudgeItem, rubric: Rubric | None = None) -> cf.Future:
        """A future of the item's `JudgeResult`, without waiting for it; graded by `rubric`
        when given, else by the judge's own."""
        rubric = rubric or self.rubric
        if rubric is None:
            raise ValueError(f"judge {self.spec.model}: its rubric is the domain's, and none was given")
        body = {"model": self.spec.model, "messages": messages(rubric, item),
                "temperature": self.spec.temperature, "max_tokens": self.spec.max_tokens}
        key = self._key(body)
        out: cf.Future = cf.Future()
        with self._lock:
            if self._closed:
                raise RuntimeError("judge: closed")
            hit = self.cache.get(key)
            if hit is not None:
                self._counts["cache_hits"] += 1
                out.set_result(JudgeResult(hit[0], hit[1], cached=True))
                return out
            shared = key in self._pending
            if shared:
                self._counts["cache_hits"] += 1  # served by the identical request in flight
            else:
                self._counts["cache_misses"] += 1
                self._pending[key] = self._pool.submit(self._request, key, json.dumps(body).encode())
            request = self._pending[key]
        request.add_done_callback(lambda f: _deliver(f, out, shared))
        return out

    def stats(self) -> dict:
        """Counters since the judge started: `cache_hits`, `cache_misses` (items that needed a
        request), `requests` (HTTP requests sent, retries included), `retries`, `judged` (scores
        obtained by requests), `errors` and `errors/<kind>` (items that failed)."""
        with self._lock:
            keys = ("cache_hits", "cache_misses", "requests", "retries", "judged", "errors")
            return {**{k: self._counts[k] for k in keys},
                    **{k: v for k, v in sorted(self._counts.items()) if k.startswith("errors/")}}

    def close(self) -> None:
        with self._lock:
            self._closed = True
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._watchdog.stop()
        with self._lock:
            for conn in list(self._connections):
                conn.close()
            self._connections.clear()

    def __enter__(self) -> "Judge":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- in a worker thread ----

    def _key(self, body: dict) -> str:
        blob = json.dumps([self.spec.base_url, body], sort_keys=True, ensure_ascii=False)
        return hashlib.sha256(blob.encode()).hexdigest()

    def _request(self, key: str, body: bytes) -> _Reply:
        start = time.monotonic()
        try:
            reply = self._attempts(body)
            with self._lock:
                self._counts["judged"] += 1
                self.cache.put(key, (reply.score, reply.reply))
            return _Reply(reply.score, reply.reply, reply.attempts, time.monotonic() - start)
        except JudgeError as e:
            with self._lock:
                self._counts["errors"] += 1
                self._counts[f"errors/{e.kind}"] += 1
            raise
        finally:
            with self._lock:
                self._pending.pop(key, None)

    def _attempts(self, body: bytes) -> _Reply:
        spec, error = self.spec, None
        for attempt in range(1, spec.retries + 2):
            if attempt > 1:
                with self._lock:
                    self._counts["retries"] += 1
                time.sleep(_backoff(spec.backoff_s, attempt - 1) * random.uniform(0.5, 1.0))
            try:
                status, data = self._post(body)
            except _Timeout:
                error = JudgeError("timeout", f"no reply within timeout_s = {spec.timeout_s:g}")
                continue
            except (OSError, http.client.HTTPException) as e:
                error = JudgeError("connection", f"{type(e).__name__}: {e}")
                continue
            if status == 200:
                return self._read(data, attempt)
            error = JudgeError("http", f"HTTP {status}: {_error_message(data)}", status=status)
            if status != 429 and status < 500:
                break  # the request itself is wrong: retrying cannot help
        assert error is not None
        raise JudgeError(error.kind, f"judge {spec.model} at {spec.base_url}: {error} "
                                     f"(after {attempt} attempt{'s' * (attempt > 1)})",
                         status=error.status, attempts=attempt) from None

    def _read(self, data: bytes, attempt: int) -> _Reply:
        try:
            text = json.loads(data)["choices"][0]["message"]["content"]
            if not isinstance(text, str):
                raise TypeError(f"content is {type(text).__name__}")
        except (ValueError, KeyError, IndexError, TypeError) as e:
            raise JudgeError("response", f"judge {self.spec.model}: a 200 reply that is not a chat completion "
                                         f"({type(e).__name__}: {e}): {data[:200]!r}", attempts=attempt) from None
        try:
            return _Reply(parse_score(text), text, attempt, 0.0)
        except UnreadableReply as e:
            raise JudgeError("parse", f"judge {self.spec.model}: unreadable reply: {e}", reply=text,
                             attempts=attempt) from None

    def _post(self, body: bytes) -> tuple[int, bytes]:
        """One request on this thread's connection, under the deadline. A connection kept alive
        that the server has closed meanwhile is replaced once, without counting an attempt."""
        for fresh in (False, True):
            conn = self._connection(fresh)
            reused = conn.sock is not None
            with self._lock:
                self._counts["requests"] += 1
            armed = self._watchdog.arm(time.monotonic() + self.spec.timeout_s, conn)
            try:
                conn.request("POST", self._path, body, self._headers)
                resp = conn.getresponse()
                data = resp.read()
            except (OSError, http.client.HTTPException) as e:
                timed_out = self._watchdog.disarm(armed)  # before closing: the watchdog may hold the socket
                self._drop(conn)
                if timed_out or isinstance(e, TimeoutError):
                    raise _Timeout() from None
                if reused and isinstance(e, (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError)):
                    with self._lock:
                        self._counts["requests"] -= 1  # a stale connection: the request was never served
                    continue
                raise
            if self._watchdog.disarm(armed):
                self._drop(conn)
                raise _Timeout()
            if resp.will_close:
                self._drop(conn)
            return resp.status, data
        raise AssertionError("unreachable")

    def _connection(self, fresh: bool) -> http.client.HTTPConnection:
        conn = getattr(self._local, "conn", None)
        if conn is None or fresh:
            if conn is not None:
                self._drop(conn)
            cls = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
            conn = cls(self._host, self._port, timeout=self.spec.timeout_s)
            self._local.conn = conn
            with self._lock:
                self._connections.add(conn)
        return conn

    def _drop(self, conn: http.client.HTTPConnection) -> None:
        conn.close()
        if getattr(self._local, "conn", None) is conn:
            self._local.conn = None
        with self._lock:
            self._connections.discard(conn)


def _deliver(request: cf.Future, out: cf.Future, shared: bool) -> None:
    if request.cancelled():
        out.set_result(JudgeResult(None, error=JudgeError("closed", "judge: closed before the request was sent")))
        return
    e = request.exception()
    if isinstance(e, JudgeError):
        out.set_result(JudgeResult(None, e.reply, e, cached=shared, attempts=0 if shared else e.attempts))
    elif e is not None:
        out.set_exception(e)  # a bug, not a judgment: let it show
    else:
        r: _Reply = request.result()
        out.set_result(JudgeResult(r.score, r.reply, cached=shared, attempts=0 if shared else r.attempts,
                                   seconds=r.seconds))


def _error_message(data: bytes) -> str:
    try:
        return str(json.loads(data)["error"]["message"])[:300]
    except (ValueError, KeyError, TypeError):
        return data[:300].decode(errors="replace")


class _Timeout(Exception):
    pass


class _Watchdog:
    """Closes the connection of a request still running at its deadline (one thread for all)."""

    def __init__(self):
        self._heap: list[tuple[float, int, list]] = []  # (deadline, seq, [conn, state]); state: armed/done/fired
        self._cond = threading.Condition()
        self._seq = itertools.count()
        self._thread: threading.Thread | None = None
        self._stopped = False

    def arm(self, deadline: float, conn: http.client.HTTPConnection) -> list:
        entry = [conn, "armed"]
        with self._cond:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="judge-watchdog", daemon=True)
                self._thread.start()
            heapq.heappush(self._heap, (deadline, next(self._seq), entry))
            self._cond.notify()
        return entry

    def disarm(self, entry: list) -> bool:
        """Ends the watch; True when the deadline had already fired."""
        with self._cond:
            fired = entry[1] == "fired"
            entry[1] = "done"
            return fired

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify()

    def _run(self) -> None:
        with self._cond:
            while not self._stopped:
                while self._heap and self._heap[0][2][1] == "done":
                    heapq.heappop(self._heap)
                if not self._heap:
                    self._cond.wait()
                    continue
                deadline, _, entry = self._heap[0]
                wait = deadline - time.monotonic()
                if wait > 0:
                    self._cond.wait(wait)
                    continue
                heapq.heappop(self._heap)
                entry[1] = "fired"
                sock = entry[0].sock
                if sock is not None:
                    try:
                        sock.shutdown(socket.SHUT_RDWR)  # wakes the reader; the worker closes the connection
                    except OSError:
                        pass
