"""`RewardService`: score many (task, sample) pairs concurrently, each under a deadline.

This is a fault boundary: a verifier that raises or runs past `reward.timeout_s` yields a
`Reward` with `failed=True` and the reason, and the run goes on. Components are combined into
`total` with `reward.weights` (and a domain's own `reward.domain_weights`); an episode's process
components (`reward.process`) join the verifier's. A sample whose tool calls hit a sandbox
failure is failed too. Reward models are not here yet.
"""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

from tempering.config import RewardConfig
from tempering.records import ExecReason, Reward, Task, Trajectory
from tempering.reward.process import process_components
from tempering.reward.verifiers import VERIFIERS, InfrastructureError, Verdict, VerifierContext
from tempering.sandbox import Sandbox
from tempering.sandbox.request import ExecTag
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

    def score(self, items: Sequence[Submission]) -> list[Reward]:
        """The reward of each submitted sample, in order."""
        self._renew_pool_if_exhausted()
        started: dict[int, float] = {}
        lock = threading.Lock()

        def call(i: int, item: Submission) -> Verdict:
            with lock:
                started[i] = time.monotonic()
            task, sample = item.task, item.sample
            broken = [c.result.error for c in sample.tool_calls
                      if c.result is not None and c.result.reason == ExecReason.SANDBOX_ERROR]
            if broken:
                raise InfrastructureError(f"a tool call's sandbox failed: {broken[0]}")
            verifier = VERIFIERS.get(task.verifier)
            if verifier is None:
                raise InfrastructureError(f"task {task.id}: unknown verifier {task.verifier!r}")
            ctx = dataclasses.replace(self.context, workspace=item.workspace, tag=item.tag)
            verdict = verifier(task, sample, ctx)
            return Verdict({**verdict.components, **process_components(task, sample)}, verdict.reason)

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
        return rewards  # type: ignore[return-value]

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _settle(self, fut: cf.Future, start: float | None, now: float, task: Task) -> Reward | None:
        if fut.done():
            try:
                return self._combine(fut.result(), task.domain)
            except InfrastructureError as e:
                return _failure(str(e))
            except Exception as e:  # noqa: BLE001 - verifier code is a fault boundary
                return _failure(f"verifier {task.verifier} crashed: {type(e).__name__}: {e}")
        if start is not None and now - start > self.cfg.timeout_s:
            self._stuck += 1
            return _failure(f"verifier {task.verifier} timed out after {self.cfg.timeout_s:g} s")
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


def _failure(reason: str) -> Reward:
    return Reward(components={}, weights={}, total=0.0, failed=True, reason=reason)
