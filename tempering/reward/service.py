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
import functools
import multiprocessing as mp
import threading
import time
from dataclasses import dataclass, field
from typing import Sequence

import pebble

from tempering.config import RewardConfig
from tempering.errors import UserError
from tempering.records import ExecReason, Reward, Task, Trajectory
from tempering.reward.deadlines import Deadlines
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
    workspace: object = None  # the episode's final state (ToolHost.final_state)
    tag: ExecTag = field(default_factory=ExecTag)


class RewardService:
    def __init__(self, cfg: RewardConfig, tokenizer: Tokenizer, sandbox: Sandbox | None = None):
        self.cfg = cfg
        self.context = VerifierContext(tokenizer, sandbox)
        self._pool = cf.ThreadPoolExecutor(cfg.workers, thread_name_prefix="verifier")
        self._stuck = 0  # workers still occupied by verifiers that timed out
        self._deadlines = Deadlines("verifier deadlines")
        self._active: set[_Scoring] = set()  # scorings submitted and not yet verified
        self._processes: pebble.ProcessPool | None = None  # for heavy verifiers, started on first use
        self._pending: set[cf.Future] = set()  # heavy verifications waited for in verifier threads
        self._lock = threading.Lock()
        self.graders = Graders(cfg) if cfg.scorers else None
        self._grading = cf.ThreadPoolExecutor(4, thread_name_prefix="graders") if self.graders else None

    def take_seconds(self) -> dict[str, float]:
        """Wall seconds each grader component spent since the previous call (summed over calls,
        which overlap the verifiers and each other)."""
        return self.graders.take_seconds() if self.graders else {}

    def submit(self, items: Sequence[Submission]) -> cf.Future[list[Reward]]:
        """Start scoring `items`; never waits. -> a future of each item's reward, in order, done
        once every verifier answered or passed its deadline and the graders answered."""
        self._renew_pool_if_exhausted()
        scoring = _Scoring(self, items, self._grade(items))
        with self._lock:
            self._active.add(scoring)
        for i, item in enumerate(items):
            self._pool.submit(self._verify, scoring, i, item).add_done_callback(functools.partial(scoring.verified, i))
        if not items:
            scoring.verified_all()
        return scoring.future

    def score(self, items: Sequence[Submission]) -> list[Reward]:
        """The reward of each submitted sample, in order (`submit`, waited for: every verifier
        call has a deadline, so the wait ends)."""
        return self.submit(items).result()

    def _verify(self, scoring: _Scoring, i: int, item: Submission) -> Verdict:
        """In a verifier thread: item `i`'s verdict; its deadline runs from here."""
        task, sample = item.task, item.sample
        try:
            domain = get_domain(task.domain)
        except UserError as e:
            raise InfrastructureError(f"task {task.id}: {e}") from None
        # A heavy verifier's own deadline runs in its process from the moment it starts there;
        # this one only backs it up, past the time a worker process may take to spawn (it
        # imports the package: seconds on a loaded machine).
        slack = _PROCESS_START_S if domain.heavy else 0.0
        scoring.started(i)
        self._deadlines.at(time.monotonic() + self.cfg.timeout_s + slack, functools.partial(scoring.expired, i))
        broken = [c.result.error for c in sample.tool_calls
                  if c.result is not None and c.result.reason == ExecReason.SANDBOX_ERROR]
        if broken:
            raise InfrastructureError(f"a tool call's sandbox failed: {broken[0]}")
        ctx = dataclasses.replace(self.context, workspace=item.workspace, tag=item.tag)
        verdict = self._heavy(domain.verify, task, sample, ctx) if domain.heavy else domain.verify(task, sample, ctx)
        return Verdict({**verdict.components, **process_components(task, sample)}, verdict.reason)

    def _timed_out(self) -> None:
        """A verifier passed its deadline and keeps its thread; once every thread is held so,
        what waits for one fails (the next `submit` starts a fresh pool)."""
        with self._lock:
            self._stuck += 1
            active = list(self._active) if self._all_stuck() else []
        for scoring in active:
            scoring.fail_waiting("verifier pool exhausted by timed-out verifiers")

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
        self._deadlines.close()
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

    def _combine(self, verdict: Verdict, domain: str) -> Reward:
        own = {**self.cfg.weights, **self.cfg.domain_weights.get(domain, {})}
        weights = {k: own.get(k, 0.0) for k in verdict.components}
        total = sum(weights[k] * float(v) for k, v in verdict.components.items())
        return Reward(components=dict(verdict.components), weights=weights, total=total, reason=verdict.reason)

    def _all_stuck(self) -> bool:
        return self._stuck >= self.cfg.workers

    def _renew_pool_if_exhausted(self) -> None:
        # Timed-out verifiers keep their threads; once they hold every worker, start afresh.
        with self._lock:
            if not self._all_stuck():
                return
            old, self._stuck = self._pool, 0
            self._pool = cf.ThreadPoolExecutor(self.cfg.workers, thread_name_prefix="verifier")
        old.shutdown(wait=False, cancel_futures=True)


_PROCESS_START_S = 60.0  # the most a heavy verifier's worker process may take to start
_TOKENIZER: list[Tokenizer] = []  # in a heavy verifier's worker process: the tokenizer it was started with


def _keep_tokenizer(tokenizer: Tokenizer) -> None:
    _TOKENIZER[:] = [tokenizer]


def _verify_there(verify: Verifier, task: Task, sample: Trajectory, workspace: object, tag: ExecTag) -> Verdict:
    return verify(task, sample, VerifierContext(_TOKENIZER[0], None, workspace, tag))


class _Scoring:
    """One `submit`: its items' rewards as they settle (answered, failed or past the deadline,
    whichever comes first), then the graders' grades, then its future."""

    def __init__(self, service: RewardService, items: Sequence[Submission], grading: cf.Future | None):
        self.service, self.items, self.grading = service, list(items), grading
        self.rewards: list[Reward | None] = [None] * len(items)
        self.began = [False] * len(items)
        self.left = len(items)
        self.lock = threading.Lock()
        self.future: cf.Future[list[Reward]] = cf.Future()

    def started(self, i: int) -> None:
        with self.lock:
            self.began[i] = True

    def verified(self, i: int, fut: cf.Future) -> None:
        domain = self.items[i].task.domain
        try:
            reward = self.service._combine(fut.result(), domain)
        except InfrastructureError as e:
            reward = _failure(str(e))
        except Exception as e:  # noqa: BLE001 - verifier code is a fault boundary
            reward = _failure(f"verifier of {domain} crashed: {type(e).__name__}: {e}")
        self._settle(i, reward)

    def expired(self, i: int) -> None:
        timeout = self.service.cfg.timeout_s
        if self._settle(i, _failure(f"verifier of {self.items[i].task.domain} timed out after {timeout:g} s")):
            self.service._timed_out()

    def fail_waiting(self, reason: str) -> None:
        """Every item whose verifier has not started fails with `reason`."""
        with self.lock:
            waiting = [i for i, began in enumerate(self.began) if not began]
        for i in waiting:
            self._settle(i, _failure(reason))

    def _settle(self, i: int, reward: Reward) -> bool:
        """The first settlement of item `i` counts. -> whether this was it."""
        with self.lock:
            if self.rewards[i] is not None:
                return False
            self.rewards[i] = reward
            self.left -= 1
            last = self.left == 0
        if last:
            self.verified_all()
        return True

    def verified_all(self) -> None:
        with self.service._lock:
            self.service._active.discard(self)
        if self.grading is None:
            self._finish(None)
        else:
            self.grading.add_done_callback(self._finish)

    def _finish(self, grading: cf.Future | None) -> None:
        try:
            self.future.set_result(self.service._with_grades(self.rewards, grading, self.items))  # type: ignore[arg-type]
        except BaseException as e:  # noqa: BLE001 - a bug: the waiter re-raises it with its traceback
            self.future.set_exception(e)


def _failure(reason: str) -> Reward:
    return Reward(components={}, weights={}, total=0.0, failed=True, reason=reason)
