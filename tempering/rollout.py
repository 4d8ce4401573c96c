"""The rollout: tasks -> n samples each from the engine -> rewards -> `Group` records.

`sample_groups` is one batch of it, used by the rollout worker in training. A trajectory keeps
every generated token with its logprob and the policy version that produced it. Single-turn
only in this version: the agent loop with tool calls in the sandbox comes with the tool domains.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Any, Sequence

import torch

from tempering.config import EngineConfig, RewardConfig, RolloutConfig, SandboxConfig, TasksConfig
from tempering.engine import LLM, SamplingParams
from tempering.models import Arch, Decoder
from tempering.pool import TaskPool
from tempering.records import Group, Task, Trajectory
from tempering.reward import RewardService
from tempering.runtime import BoundedQueue, Stall
from tempering.sandbox import make_sandbox
from tempering.tokenizer import Tokenizer, load_tokenizer
from tempering.weights import WeightStore


def generate_trajectories(engine: LLM, tokenizer: Tokenizer, tasks: Sequence[Task],
                          params: SamplingParams) -> list[list[Trajectory]]:
    """n = params.n samples of each task; max_tokens is capped by each task's budget."""
    prompts = [tokenizer.encode_prompt(t.prompt, t.messages) for t in tasks]
    per_task = [dataclasses.replace(params, max_tokens=min(params.max_tokens, t.budget.max_tokens)) for t in tasks]
    outputs = engine.generate(prompts, per_task)
    now = time.time()
    result = []
    for task, prompt, out in zip(tasks, prompts, outputs):
        result.append([Trajectory(
            task_id=task.id, domain=task.domain, sample_index=c.index, prompt_ids=prompt,
            token_ids=c.token_ids, logprobs=c.logprobs, loss_mask=[1] * len(c.token_ids),
            versions=c.versions, text=c.text, finish_reason=c.finish_reason, created_at=now,
        ) for c in out.outputs])
    return result


def sample_groups(engine: LLM, tokenizer: Tokenizer, reward: RewardService, tasks: Sequence[Task],
                  params: SamplingParams) -> list[Group]:
    samples = generate_trajectories(engine, tokenizer, tasks, params)
    flat = [(task, t) for task, group in zip(tasks, samples) for t in group]
    rewards = reward.score(flat)
    groups, k = [], 0
    for task, group in zip(tasks, samples):
        groups.append(Group(task=task, trajectories=group, rewards=rewards[k: k + len(group)]))
        k += len(group)
    return groups


# ---------------------------------------------------------------------------------------------
# The rollout worker: a process that keeps producing batches of groups for the trainer.


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
    max_staleness: int
    seed: int
    first_batch: int  # batches produced before (a resumed run continues the count)
    threads: int
    stall_timeout_s: float
    spawned_at: float  # time.monotonic() when the parent started the worker (the clock is system-wide)


@dataclass
class RolloutBatch:
    index: int
    version: int  # engine version when the batch started
    groups: list[Group]
    generated_tokens: int
    seconds: float
    pass_rates: dict[str, float]
    startup_s: float | None = None  # on the worker's first batch: from spawn to ready to generate


def run_rollout_worker(spec: RolloutSpec, store: WeightStore, out: BoundedQueue, stop: Any) -> None:
    """Admission under the staleness bound: batch b starts only once the trainer has published
    version b - max_staleness, so no sample can be born too stale; the buffer still checks."""
    torch.set_num_threads(spec.threads)
    torch.manual_seed(spec.seed + spec.first_batch)
    tokenizer = load_tokenizer(spec.tokenizer_dir)
    engine = LLM(Decoder(spec.arch), tokenizer, spec.engine)
    engine.version = -1
    pool = TaskPool(spec.tasks, seed_offset=spec.first_batch)
    sandbox = make_sandbox(spec.sandbox, spec.run_dir) if pool.needs_sandbox else None
    reward = RewardService(spec.reward, tokenizer, sandbox)
    r = spec.rollout
    params = SamplingParams(n=r.samples_per_task, temperature=r.temperature, top_p=r.top_p, max_tokens=r.max_tokens)
    index = spec.first_batch
    startup_s: float | None = time.monotonic() - spec.spawned_at
    try:
        while _admitted(store, index - spec.max_staleness, stop, spec.stall_timeout_s):
            store.pull(engine)
            start, before = time.perf_counter(), engine.stats["generated_tokens"]
            groups = sample_groups(engine, tokenizer, reward, pool.next_tasks(r.tasks_per_step), params)
            for g in groups:
                pool.record(g.task.domain, [x.outcome for x in g.rewards if not x.failed])
            batch = RolloutBatch(index, engine.version, groups, engine.stats["generated_tokens"] - before,
                                 time.perf_counter() - start, pool.pass_rates(), startup_s)
            startup_s = None
            if not out.put(batch, spec.stall_timeout_s, "trainer (consuming rollout batches)", stop):
                break
            index += 1
    finally:
        reward.close()
        if sandbox is not None:
            sandbox.close()


def _admitted(store: WeightStore, version: int, stop: Any, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while store.version < version:
        if stop.is_set():
            return False
        if time.monotonic() > deadline:
            raise Stall(f"trainer: version {version} was not published within {timeout:g} s")
        time.sleep(0.005)
    return not stop.is_set()
