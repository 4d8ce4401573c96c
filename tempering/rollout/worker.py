"""The rollout worker: a process that keeps groups in flight on its engine and hands the trainer
batches of scored groups, and evaluates the policy on the held-out tasks when asked.

It builds its components from their config sections (engine, task pool, sandbox when a domain
needs one, reward service) and hands them to an `EpisodeRunner`. Admission keeps the staleness
bound: batch b's groups start only once the trainer has published version b - max_staleness, so
no sample can be born too stale (the buffer still checks). Groups of several admitted batches
run at once; a batch goes to the trainer, in order, when its last group is scored. New weights
are loaded as soon as they are published: running requests are recomputed under them and keep
the versions of the tokens they already have. Evaluation runs greedy episodes of the held-out
tasks through the same runner, at the version the trainer asks for.
"""

from __future__ import annotations

import queue
import time
from dataclasses import dataclass, field
from typing import Any

import torch

from tempering.config import EngineConfig, RewardConfig, RolloutConfig, SandboxConfig, TasksConfig
from tempering.engine import LLM, SamplingParams
from tempering.evaluation import EvalResult, summarize
from tempering.models import Arch, Decoder
from tempering.pool import TaskPool
from tempering.records import Group
from tempering.reward import RewardService
from tempering.rollout.runner import EpisodeRunner
from tempering.runtime import BoundedQueue, Stall
from tempering.sandbox import make_sandbox
from tempering.tokenizer import load_tokenizer
from tempering.weights import WeightStore

_POLL_S = 0.02  # longest the loop waits for thread work when the engine has nothing to do


@dataclass(frozen=True)
class RolloutSpec:
    """What a rollout worker builds its components from (their own config sections)."""

    arch: Arch
    run_dir: str  # the sandbox's per-execution log goes here
    tokenizer_dir: str
    engine: EngineConfig
    sandbox: SandboxConfig
    tasks: TasksConfig
    rollout: RolloutConfig
    reward: RewardConfig
    eval_max_tokens: int
    max_staleness: int
    seed: int
    first_batch: int  # batches produced before (a resumed run continues the count)
    last_batch: int  # batches [first_batch, last_batch) are produced; then only evaluations
    threads: int
    stall_timeout_s: float
    spawned_at: float  # time.monotonic() when the parent started the worker (the clock is system-wide)


@dataclass
class RolloutBatch:
    index: int
    version: int  # engine version when the batch's groups started
    groups: list[Group]
    generated_tokens: int
    seconds: float  # from its first group's start to its last group's score
    pass_rates: dict[str, float]
    startup_s: float | None = None  # on the worker's first batch: from spawn to ready to generate
    # the runner's time since the previous batch: engine steps, and thread time (overlapping
    # them) opening workspaces, running tools and scoring
    runner_seconds: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class EvalRequest:
    label: str  # "baseline", "final", "step-000010"
    version: int  # the policy version to evaluate: the trainer publishes it, then waits


@dataclass
class _Open:
    """A batch being generated or waiting to be handed over."""

    version: int
    started: float
    groups: list[Group] = field(default_factory=list)


def run_rollout_worker(spec: RolloutSpec, store: WeightStore, out: BoundedQueue, requests: Any, replies: Any,
                       stop: Any) -> None:
    torch.set_num_threads(spec.threads)
    torch.manual_seed(spec.seed + spec.first_batch)
    tokenizer = load_tokenizer(spec.tokenizer_dir)
    engine = LLM(Decoder(spec.arch), tokenizer, spec.engine, version=-1)  # the first pull loads the published weights
    pool = TaskPool(spec.tasks, seed_offset=spec.first_batch)
    sandbox = make_sandbox(spec.sandbox, spec.run_dir) if pool.needs_sandbox else None
    reward = RewardService(spec.reward, tokenizer, sandbox)
    runner = EpisodeRunner.build(engine, tokenizer, reward, sandbox, spec.rollout.tool_parser, spec.sandbox.workers)
    try:
        Worker(spec, store, out, requests, replies, stop, engine, pool, runner).run()
    finally:
        runner.close()
        reward.close()
        if sandbox is not None:
            sandbox.close()


class Worker:
    def __init__(self, spec: RolloutSpec, store: WeightStore, out: BoundedQueue, requests: Any, replies: Any,
                 stop: Any, engine: LLM, pool: TaskPool, runner: EpisodeRunner):
        self.spec, self.store, self.out, self.requests, self.replies, self.stop = spec, store, out, requests, replies, stop
        self.engine, self.pool, self.runner = engine, pool, runner
        r = spec.rollout
        self.params = SamplingParams(n=r.samples_per_task, temperature=r.temperature, top_p=r.top_p,
                                     max_tokens=r.max_tokens)
        self.next_batch = spec.first_batch
        self.open: dict[int, _Open] = {}
        self.evals: dict[str, tuple[list, list[Group]]] = {}  # label -> (held-out tasks, groups scored)
        self.startup_s: float | None = time.monotonic() - spec.spawned_at
        self.progress = time.monotonic()  # the last batch started or handed over (stall deadline)
        self.reported: dict[str, float] = {}  # runner.seconds as of the last batch handed over

    def run(self) -> None:
        while not self.stop.is_set():
            self.store.pull(self.engine)
            self._take_requests()
            self._admit()
            if self.runner.busy:
                for key, group in self.runner.poll(_POLL_S):
                    self._route(key, group)
            else:
                time.sleep(_POLL_S)
            self._hand_over()
            self._check_stall()

    def _take_requests(self) -> None:
        while True:
            try:
                req: EvalRequest = self.requests.get_nowait()
            except queue.Empty:
                return
            self.store.pull(self.engine)
            assert self.engine.version == req.version, (
                f"evaluation of version {req.version} asked while version {self.engine.version} is loaded")
            tasks = self.pool.heldout()
            self.evals[req.label] = (tasks, [])
            greedy = SamplingParams(temperature=0.0, max_tokens=self.spec.eval_max_tokens)
            for task in tasks:
                self.runner.start(task, 1, greedy, self.spec.eval_max_tokens, ("eval", req.label))

    def _admit(self) -> None:
        """Start every batch the staleness bound admits."""
        s, r = self.spec, self.spec.rollout
        while self.next_batch < s.last_batch and self.store.version >= self.next_batch - s.max_staleness:
            b = self.next_batch
            self.open[b] = _Open(self.engine.version, time.perf_counter())
            for task in self.pool.next_tasks(r.tasks_per_step):
                self.runner.start(task, r.samples_per_task, self.params, r.max_tokens, ("train", b))
            self.next_batch += 1
            self.progress = time.monotonic()

    def _route(self, key: tuple[str, Any], group: Group) -> None:
        kind, where = key
        if kind == "train":
            self.pool.record(group.task.domain, [x.outcome for x in group.rewards if not x.failed])
            self.open[where].groups.append(group)
            return
        tasks, done = self.evals[where]
        done.append(group)
        if len(done) == len(tasks):
            del self.evals[where]
            order = {t.id: i for i, t in enumerate(tasks)}
            done.sort(key=lambda g: order[g.task.id])
            self.replies.put(summarize(tasks, done), self.spec.stall_timeout_s, "trainer (taking an evaluation)",
                             self.stop)

    def _hand_over(self) -> None:
        """Give the trainer the oldest batch if it is complete and the queue has room."""
        if not self.open:
            return
        b = min(self.open)
        batch = self.open[b]
        if len(batch.groups) < self.spec.rollout.tasks_per_step:
            return
        tokens = sum(t.num_model_tokens for g in batch.groups for t in g.trajectories)
        # the runner's phases, and each reward-model and judge component's calls (`rm_<name>`)
        seconds = {**self.runner.seconds, **self.runner.reward.seconds()}
        split = {k: v - self.reported.get(k, 0.0) for k, v in seconds.items()}
        item = RolloutBatch(b, batch.version, batch.groups, tokens, time.perf_counter() - batch.started,
                            self.pool.pass_rates(), self.startup_s, split)
        if self.out.try_put(item):
            del self.open[b]
            self.startup_s = None
            self.reported = seconds
            self.progress = time.monotonic()

    def _check_stall(self) -> None:
        """A complete batch the trainer does not take, or no version to admit the next batch
        while nothing else is in flight, for longer than the stall deadline, names the trainer."""
        if time.monotonic() - self.progress <= self.spec.stall_timeout_s:
            return
        t = self.spec.stall_timeout_s
        b = min(self.open, default=None)
        if b is not None and len(self.open[b].groups) == self.spec.rollout.tasks_per_step:
            raise Stall(f"trainer: took no rollout batch for {t:g} s")
        if not self.runner.busy and self.next_batch < self.spec.last_batch:
            raise Stall(f"trainer: version {self.next_batch - self.spec.max_staleness} was not published within {t:g} s")
