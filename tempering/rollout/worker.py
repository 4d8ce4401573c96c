"""The rollout worker: a process that runs the groups the global scheduler orders on its engine
and sends each back scored, and evaluates the policy on the held-out tasks when asked.

It builds its engine (Tempering's or vLLM), the node's sandbox service when a domain needs one,
the reward service and an `EpisodeRunner` over them. It draws no task and admits nothing: the
trainer's side sends `GroupOrder`s, the node's `NodePolicy` and `EvalRequest`s through one queue
and takes `GroupDone`s back, each with what weight loads cost. New weights (from a `WeightStore`
or a `BlobChannel`) load between engine steps by `weights.EngineSync`: at once with
`rollout.partial_rollouts`, else after the requests in flight finish. Evaluation runs greedy
episodes at the version the trainer asks for. With `run.deterministic` a batch's orders start
together and an evaluation runs alone. Told to `Leave` (a drained replica), it finishes what it
runs and returns."""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import assert_never

import torch

from tempering.config import EngineConfig, RewardConfig, RolloutConfig, SandboxConfig, SchedulerConfig
from tempering.engine import LLM, SamplingParams
from tempering.engine.llm_engine import torch_dtype
from tempering.engine.vllm_backend import VLLMEngine
from tempering.evaluation import EvalResult, summarize
from tempering.models import Arch, Decoder
from tempering.records import Group, Task
from tempering.reward import RewardService
from tempering.rollout.group_key import GroupKey
from tempering.rollout.runner import EpisodeRunner
from tempering.runtime import Event, Queue, Stall
from tempering.sandbox import make_sandbox
from tempering.scheduler.orders import GroupOrder, GroupReport, NodePolicy
from tempering.scheduler.local import NodeStats
from tempering.scheduler.node import NodeSandbox
from tempering.tasks import load_plugins
from tempering.tokenizer import load_tokenizer
from tempering.weights import BlobChannel, EngineSync, SyncStats, WeightSource, WeightStore

_POLL_S = 0.02  # longest the loop waits for thread work or a message when it has nothing to do


@dataclass(frozen=True)
class RolloutSpec:
    """What a rollout worker builds its components from (their own config sections)."""

    arch: Arch
    run_dir: str  # the sandbox's per-execution log goes here
    tokenizer_dir: str
    engine: EngineConfig
    sandbox: SandboxConfig
    scheduler: SchedulerConfig
    plugins: tuple[str, ...]  # tasks.plugins: their domains' verifiers run here
    needs_sandbox: bool  # a domain of the mix runs code: the node's sandbox service starts
    rollout: RolloutConfig
    reward: RewardConfig
    eval_max_tokens: int
    seed: int
    first_batch: int  # batches produced before (a resumed run continues the count): seeds the worker
    threads: int
    stall_timeout_s: float
    spawned_at: float  # time.time() when the parent started the worker (wall clock: a replica may run elsewhere)
    # while the engine is busy, how often the loop looks at its stop event and orders: 0 = every
    # engine step (local reads); a remote runtime's looks are calls of about 1 ms each
    check_every_s: float = 0.0
    # run.deterministic: a batch's orders are started together, once all came, at the version they
    # were admitted at; evaluations and new orders are taken only while nothing runs
    deterministic: bool = False
    groups_per_batch: int = 0


@dataclass(frozen=True)
class EvalRequest:
    label: str  # "baseline", "final", "step-000010"
    version: int  # the policy version to evaluate: the trainer publishes it, then waits
    tasks: list[Task]  # the held-out tasks (the scheduler's pool holds the split)


@dataclass(frozen=True)
class GroupDone:
    """A scored group, what it used, and what the worker spent since its previous one (so that
    a batch's figures are the sum of its groups' and of those set aside)."""

    order: GroupOrder
    group: Group
    version: int  # the engine's version when the group started
    report: GroupReport
    runner_seconds: dict[str, float]  # the runner's phases and the graders' calls since the previous group
    sync: SyncStats  # the engine's weight loads since the previous group
    node: NodeStats | None  # the node's queue now and the waits since the previous report
    startup_s: float | None  # on the first: from the worker's spawn to ready to generate


@dataclass(frozen=True)
class Leave:
    """The replica drains (elastic replicas): it takes no more messages, finishes what it runs,
    closes its engine, sandbox and graders, and returns."""


# what the trainer's side sends a rollout worker, on one queue
WorkerMessage = GroupOrder | NodePolicy | EvalRequest | Leave


def run_rollout_worker(spec: RolloutSpec, weights: WeightStore | BlobChannel | WeightSource,
                       out: Queue[GroupDone], requests: Queue[WorkerMessage], replies: Queue[EvalResult], stop: Event,
                       replica: int = 0) -> None:
    torch.set_num_threads(spec.threads)
    torch.manual_seed(spec.seed + spec.first_batch + 7919 * replica)  # replicas sample apart
    source = weights.open() if isinstance(weights, BlobChannel) else weights
    load_plugins(spec.plugins)
    tokenizer = load_tokenizer(spec.tokenizer_dir)
    engine = _engine(spec, tokenizer, replica)
    node = None
    if spec.needs_sandbox:
        sb = spec.sandbox
        node = NodeSandbox(make_sandbox(sb, spec.run_dir), sb.workers, sb.workers * sb.memory_mb, sb.memory_mb,
                           spec.scheduler.aging_s, spec.stall_timeout_s, count_jobs=spec.deterministic)
    reward = RewardService(spec.reward, tokenizer, node)
    # More threads than sandbox slots, so that jobs wait at the node, where its scheduler orders them.
    threads = 4 * spec.sandbox.workers if node is not None else spec.sandbox.workers
    runner = EpisodeRunner.build(engine, tokenizer, reward, node, spec.rollout.tool_parser, threads,
                                 lockstep=spec.deterministic, settle_s=spec.stall_timeout_s)
    try:
        Worker(spec, source, out, requests, replies, stop, engine, runner, node).run()
    finally:
        if source is not weights:
            source.close()
        runner.close()
        reward.close()
        if isinstance(engine, VLLMEngine):
            engine.close()
        if node is not None:
            node.close()


def _engine(spec: RolloutSpec, tokenizer, replica: int) -> LLM | VLLMEngine:
    """The engine `engine.backend` names, at version -1: the first pull loads the published weights."""
    if spec.engine.backend == "vllm":
        return VLLMEngine(Decoder(spec.arch), tokenizer, spec.engine, version=-1,
                          seed=spec.seed + spec.first_batch + 7919 * replica)
    model = Decoder(spec.arch)  # built in engine.dtype here, so the engine casts no copy of it
    dtype = torch_dtype(spec.engine.dtype)
    return LLM(model if dtype is None else model.to(dtype), tokenizer, spec.engine, version=-1)


class Worker:
    def __init__(self, spec: RolloutSpec, store: WeightSource, out: Queue[GroupDone], requests: Queue[WorkerMessage],
                 replies: Queue[EvalResult], stop: Event, engine: LLM, runner: EpisodeRunner, node: NodeSandbox | None):
        self.spec, self.store, self.out, self.requests, self.replies, self.stop = spec, store, out, requests, replies, stop
        self.engine, self.runner, self.node = engine, runner, node
        r = spec.rollout
        self.params = SamplingParams(n=r.samples_per_task, temperature=r.temperature, top_p=r.top_p,
                                     max_tokens=r.max_tokens)
        self.orders: dict[int, tuple[GroupOrder, int]] = {}  # order id -> (order, engine version at start)
        self.evals: dict[str, tuple[list[Task], list[Group]]] = {}  # label -> (held-out tasks, groups scored)
        self.sync = EngineSync(store, engine, r.partial_rollouts, spec.stall_timeout_s)
        self.sync_sent = SyncStats()  # the loads counted in the groups sent so far
        self.waiting_evals: list[EvalRequest] = []  # asked during a drain or before their version arrived
        # across machines, as good as their clocks agree (NTP: milliseconds); never negative
        self.startup_s: float | None = max(0.0, time.time() - spec.spawned_at)
        self.heard = time.monotonic()  # the last message from the trainer's side (stall deadline)
        self.looked = float("-inf")  # the last look at the stop event and the orders
        self.held: list[GroupOrder] = []  # run.deterministic: a batch's orders until all came
        self.leaving = False  # told to `Leave`: it returns once nothing runs

    def run(self) -> None:
        while True:
            look = not self.runner.busy or time.monotonic() - self.looked >= self.spec.check_every_s
            if look:
                if self.stop.is_set() or (self.leaving and not self.runner.busy):
                    return
                self.looked = time.monotonic()
            if self.sync.poll() and self.waiting_evals:
                self._start_evals()
            if look and not self.leaving and not (self.spec.deterministic and self.runner.busy):
                self._take_requests(wait=0.0 if self.runner.busy else _POLL_S)
            if self.runner.busy:
                for key, group in self.runner.poll(_POLL_S):
                    self._route(key, group)
            elif time.monotonic() - self.heard > self.spec.stall_timeout_s:
                raise Stall(f"trainer: sent the rollout worker no work for {self.spec.stall_timeout_s:g} s")

    def _take_requests(self, wait: float) -> None:
        while True:
            got, msg = self.requests.try_get(wait, "trainer (sending orders)")
            if not got:
                return
            wait = 0.0
            self.heard = time.monotonic()
            if not self._handle(msg):
                return

    def _handle(self, msg: WorkerMessage | None) -> bool:
        """Act on one message. -> whether to take more now (run.deterministic: not while a batch
        or an evaluation runs alone)."""
        match msg:
            case GroupOrder() if self.spec.deterministic:
                self.held.append(msg)
                if len(self.held) == self.spec.groups_per_batch:
                    self._start_held()
                    return False  # nothing more is taken while they run
            case GroupOrder():
                self._start(msg)
            case NodePolicy():
                if self.node is not None:
                    self.node.set_policy(msg.quotas, msg.priorities)
            case EvalRequest():
                self._evaluate(msg)
                return not (self.spec.deterministic and self.runner.busy)  # the evaluation runs alone
            case Leave():
                self.leaving = True
                return False
            case None:
                raise AssertionError("a rollout worker's orders carry no None")
            case _:
                assert_never(msg)
        return True

    def _start(self, order: GroupOrder) -> None:
        self.orders[order.id] = (order, self.engine.version)
        r = self.spec.rollout
        task = order.task.make()  # a generator's task is made here, beside the episodes
        self.runner.start(task, r.samples_per_task, self.params, r.max_tokens, GroupKey.train(order.batch, order.id))

    def _start_held(self) -> None:
        """run.deterministic: a whole batch, in order, at the version it was admitted at (published
        before its orders were sent; a remote source may show it a moment later)."""
        version = max(o.version for o in self.held)
        deadline = time.monotonic() + self.spec.stall_timeout_s
        while self.engine.version < version:
            if not self.sync.poll():
                if time.monotonic() > deadline:
                    raise Stall(f"weights: version {version} did not reach the rollout worker in "
                                f"{self.spec.stall_timeout_s:g} s")
                time.sleep(_POLL_S)
        for order in sorted(self.held, key=lambda o: o.id):
            self._start(order)
        self.held = []

    def _evaluate(self, req: EvalRequest) -> None:
        self.waiting_evals.append(req)
        self.sync.poll()
        if not self.sync.draining:
            self._start_evals()

    def _start_evals(self) -> None:
        """Start the evaluations of the version now loaded; those of a version still on its way
        (a blob source) wait for its load. The trainer publishes nothing newer meanwhile."""
        greedy = SamplingParams(temperature=0.0, max_tokens=self.spec.eval_max_tokens)
        waiting = []
        for req in self.waiting_evals:
            assert self.engine.version <= req.version, (
                f"evaluation of version {req.version} asked while version {self.engine.version} is loaded")
            if self.engine.version < req.version:
                waiting.append(req)
                continue
            self.evals[req.label] = (req.tasks, [])
            for task in req.tasks:
                self.runner.start(task, 1, greedy, self.spec.eval_max_tokens, GroupKey.evaluation(req.label))
        self.waiting_evals = waiting

    def _route(self, key: GroupKey, group: Group) -> None:
        if key.order is not None:
            self._send(key.order, group)
            return
        tasks, done = self.evals[key.label]
        done.append(group)
        if len(done) == len(tasks):
            del self.evals[key.label]
            order = {t.id: i for i, t in enumerate(tasks)}
            done.sort(key=lambda g: order[g.task.id])
            self.replies.put(summarize(tasks, done), self.spec.stall_timeout_s, "trainer (taking an evaluation)",
                             self.stop)

    def _send(self, order_id: int, group: Group) -> None:
        order, version = self.orders.pop(order_id)
        scored = [r for r in group.rewards if not r.failed]
        report = GroupReport(order_id, sum(t.num_model_tokens for t in group.trajectories),
                             self.node.take_seconds(group.task.id) if self.node is not None else 0.0,
                             tuple(r.outcome for r in scored), tuple(r.total for r in scored))
        seconds = {**self.runner.take_seconds(), **self.runner.reward.take_seconds()}
        loads, self.sync_sent = self.sync.stats.minus(self.sync_sent), dataclasses.replace(self.sync.stats)
        done = GroupDone(order, group, version, report, seconds, loads,
                         self.node.report() if self.node is not None else None, self.startup_s)
        self.startup_s = None
        # the trainer's side admits a bounded number of groups, so the queue has room for all of them
        self.out.put(done, self.spec.stall_timeout_s, "trainer (taking scored groups)", self.stop)
