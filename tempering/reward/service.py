"""`RewardService`: score many (task, sample) pairs concurrently, each under a deadline.

This is a fault boundary: a verifier that raises or runs past `reward.timeout_s` yields a
`Reward` with `failed=True` and the reason, and the run goes on. Components are combined into
`total` with `reward.weights` (and a domain's own `reward.domain_weights`); an episode's process
components (`reward.process`) join the verifier's. A sample whose tool calls hit a sandbox
failure is failed too. Reward models and judges (`graders.Graders`: `rm_<name>`, `judge_<name>`)
grade the samples of the domains `reward.scorers` names, in a thread of their own while the
verifiers run; a sample they cannot grade is failed like one whose verifier failed.
"""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import multiprocessing as mp
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

import pebble

from tempering.config import RewardConfig
from tempering.errors import UserError
from tempering.records import ExecReason, Reward, Task, Trajectory
from tempering.reward.graders import Graders
from tempering.reward.process import process_components
from tempering.verdict import InfrastructureError, Verdict, Verifier, VerifierContext
from tempering.sandbox import Sandbox
from tempering.sandbox.request import ExecTag
from tempering.tasks.registry import get_domain
from tempering.tokenizer import Tokenizer


@dataclass(frozen=True)
class Submission:
    """A sample to score: its task, the sample, the final workspace of its episode (tasks with
    one), and the tag its verifier's sandbox executions carry in sandbox.jsonl."""

    task: Task
    sample: Trajectory
    workspace: Any = None
    tag: ExecTag = field(default_factory=ExecTag)


class RewardService:
    def __init__(self, cfg: RewardConfig, tokenizer: Tokenizer, sandbox: Sandbox | None = None):
        self.cfg = cfg
        self.context = VerifierContext(tokenizer, sandbox)
        self._pool = cf.ThreadPoolExecutor(cfg.workers, thread_name_prefix="verifier")
        self._stuck = 0  # workers still occupied by verifiers that timed out
        self._processes: pebble.ProcessPool | None = None  # for heavy verifiers, started on first use
        self._pending: set[cf.Future] = set()  # heavy verifications waited for in verifier threads
        self._lock = threading.Lock()
        self.graders = Graders(cfg) if cfg.scorers else None
        self._grading = cf.ThreadPoolExecutor(4, thread_name_prefix="graders") if self.graders else None

    def take_seconds(self) -> dict[str, float]:
        """Wall seconds each grader component spent since the previous call (summed over calls,
        which overlap the verifiers and each other)."""
        return self.graders.take_seconds() if self.graders else {}

    def score(self, items: Sequence[Submission]) -> list[Reward]:
        """The reward of each submitted sample, in order."""
        self._renew_pool_if_exhausted()
        started: dict[int, float] = {}
        lock = threading.Lock()

        def call(i: int, item: Submission) -> Verdict:
            task, sample = item.task, item.sample
            try:
                domain = get_domain(task.domain)
            except UserError as e:
                raise InfrastructureError(f"task {task.id}: {e}") from None
            with lock:
                # A heavy verifier's own deadline runs in its process from the moment it starts
                # there; this one only backs it up, past the time a worker process may take to
                # spawn (it imports the package: seconds on a loaded machine).
                started[i] = time.monotonic() + (_PROCESS_START_S if domain.heavy else 0.0)
            broken = [c.result.error for c in sample.tool_calls
                      if c.result is not None and c.result.reason == ExecReason.SANDBOX_ERROR]
            if broken:
                raise InfrastructureError(f"a tool call's sandbox failed: {broken[0]}")
            ctx = dataclasses.replace(self.context, workspace=item.workspace, tag=item.tag)
            verdict = self._heavy(domain.verify, task, sample, ctx) if domain.heavy else domain.verify(task, sample, ctx)
            return Verdict({**verdict.components, **process_components(task, sample)}, verdict.reason)

        grading = self._grade(items)
        futures = [self._pool.submit(call, i, item) for i, item in enumerate(items)]
        rewards: list[Reward | None] = [None] * len(items)
        while any(r is None for r in rewards):
            cf.wait([f for f, r in zip(futures, rewards) if r is None], timeout=0.05,
                    return_when=cf.FIRST_COMPLETED)
            now = time.monotonic()
            for i, fut in enumerate(futures):
                if rewards[i] is None:
                    rewards[i] = self._settle(fut, started.get(i), now, items[i].task)
            if all(r is not None or i not in started for i, r in enumerate(rewards)) and self._all_stuck():
                rewards = [r or _failure("verifier pool exhausted by timed-out verifiers") for r in rewards]
        return self._with_grades(rewards, grading, items)  # type: ignore[arg-type]

    def _grade(self, items: Sequence[Submission]) -> cf.Future | None:
        if self.graders is None or not any(self.graders.components(it.task.domain) for it in items):
            return None
        contexts = [dataclasses.replace(self.context, workspace=it.workspace, tag=it.tag) for it in items]
        return self._grading.submit(self.graders.grade, [it.task for it in items], [it.sample for it in items],
                                    contexts)

    def _with_grades(self, rewards: list[Reward], grading: cf.Future | None, items: Sequence[Submission]) -> list[Reward]:
        if grading is None:
            return rewards
        try:
            grades = grading.result()
        except Exception as e:  # noqa: BLE001 - domains' grade items are plugin code: a fault boundary
            grades = [InfrastructureError(f"graders crashed: {type(e).__name__}: {e}")] * len(rewards)
        out = []
        for reward, grade, item in zip(rewards, grades, items):
            if reward.failed or not isinstance(grade, dict):
                out.append(reward if reward.failed else _failure(str(grade)))
                continue
            out.append(self._combine(Verdict({**reward.components, **grade}, reward.reason), item.task.domain))
        return out

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        if self.graders is not None:
            self._grading.shutdown(wait=False, cancel_futures=True)
            self.graders.close()
        with self._lock:
            pending = list(self._pending)
        for future in pending:  # wakes their threads, which an exiting interpreter joins
            future.cancel()
        if self._processes is not None:
            self._processes.stop()
            self._processes.join(timeout=10)

    def _heavy(self, verify: Verifier, task: Task, sample: Trajectory, ctx: VerifierContext) -> Verdict:
        """`verify` in a worker process that is killed at the deadline (a thread cannot be):
        mesh booleans and PDF parsing must not run on forever. The sandbox stays here."""
        with self._lock:
            if self._processes is None:
                # spawned, not forked: this process has threads (and torch's) that a fork would copy mid-state
                self._processes = pebble.ProcessPool(self.cfg.workers, context=mp.get_context("spawn"),
                                                     initializer=_keep_tokenizer, initargs=(ctx.tokenizer,))
        # The tokenizer went to each worker once, when it started; the rest of the context
        # travels with the call (a sandbox cannot: it stays in this process).
        future = self._processes.schedule(_verify_there, args=(verify, task, sample, ctx.workspace, ctx.tag),
                                          timeout=self.cfg.timeout_s)
        with self._lock:
            self._pending.add(future)
        try:
            # pebble's deadline runs from the start in the process; this wait's also covers the
            # process's spawn, and a pool stopped under it (`close` cancels what is pending)
            return future.result(timeout=self.cfg.timeout_s + _PROCESS_START_S)
        except cf.TimeoutError:
            if not future.done():
                future.cancel()
                raise InfrastructureError(f"verifier of {task.domain}: no worker process ran it within "
                                          f"{self.cfg.timeout_s + _PROCESS_START_S:g} s") from None
            raise InfrastructureError(f"verifier of {task.domain} timed out after {self.cfg.timeout_s:g} s "
                                      "(its process was killed)") from None
        except cf.CancelledError:
            raise InfrastructureError(f"verifier of {task.domain}: the reward service closed") from None
        except pebble.ProcessExpired as e:
            raise InfrastructureError(f"verifier of {task.domain} died: {e}") from None
        finally:
            with self._lock:
                self._pending.discard(future)

    def _settle(self, fut: cf.Future, start: float | None, now: float, task: Task) -> Reward | None:
        if fut.done():
            try:
                return self._combine(fut.result(), task.domain)
            except InfrastructureError as e:
                return _failure(str(e))
            except Exception as e:  # noqa: BLE001 - verifier code is a fault boundary
                return _failure(f"verifier of {task.domain} crashed: {type(e).__name__}: {e}")
        if start is not None and now - start > self.cfg.timeout_s:
            self._stuck += 1
            return _failure(f"verifier of {task.domain} timed out after {self.cfg.timeout_s:g} s")
        return None

    def _combine(self, verdict: Verdict, domain: str) -> Reward:
        own = {**self.cfg.weights, **self.cfg.domain_weights.get(domain, {})}
        weights = {k: own.get(k, 0.0) for k in verdict.components}
        total = sum(weights[k] * float(v) for k, v in verdict.components.items())
        return Reward(components=dict(verdict.components), weights=weights, total=total, reason=verdict.reason)

    def _all_stuck(self) -> bool:
        return self._stuck >= self.cfg.workers

    def _renew_pool_if_exhausted(self) -> None:
        # Timed-out verifiers keep their threads; once they hold every worker, start afresh.
        if self._all_stuck():
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = cf.ThreadPoolExecutor(self.cfg.workers, thread_name_prefix="verifier")
            self._stuck = 0


_PROCESS_START_S = 60.0  # the most a heavy verifier's worker process may take to start
_TOKENIZER: list[Tokenizer] = []  # in a heavy verifier's worker process: the tokenizer it was started with


def _keep_tokenizer(tokenizer: Tokenizer) -> None:
    _TOKENIZER[:] = [tokenizer]


def _verify_there(verify: Verifier, task: Task, sample: Trajectory, workspace: Any, tag: ExecTag) -> Verdict:
    return verify(task, sample, VerifierContext(_TOKENIZER[0], None, workspace, tag))


def _failure(reason: str) -> Reward:
    return Reward(components={}, weights={}, total=0.0, failed=True, reason=reason)
