"""`train`: builds the components from the config and runs the post-training loop.

Read top to bottom: prepare the run (or resume it), SFT warm-up, then with the rollout workers
running on the runtime `[runtime]` names (local processes or a Ray cluster): a baseline
evaluation, the RL loop (the workers feed scored groups through a bounded queue; the trainer
filters them by staleness, steps, and publishes the next weight version), a checkpoint and a
final evaluation; then the summary. A worker runs the evaluations too, so the trainer process
builds no engine and no sandbox. This module wires components together; it implements none of
them.
"""

from __future__ import annotations

import dataclasses
import json
import string
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

import torch

from tempering.errors import UserError
from tempering.jsonvalue import JSONObject
from tempering.agent.format import tool_format
from tempering.algorithms import AdvantageSpec, Overlong, get_advantage
from tempering.buffer import Accounting, Buffer
from tempering.config import Config, ConfigError, ModelConfig, RuntimeConfig, TokenizerConfig, to_dict
from tempering.evaluation import EvalResult
from tempering.lineage import LineageStore, rewind as rewind_lineage
from tempering.metrics import Metrics, plot_rewards, progress_bar, rewind_jsonl
from tempering.models import Arch, Decoder, build_model, load_hf, save_hf
from tempering.models.location import local_model
from tempering.models.lora import Merged, adapters, apply_lora, load_peft
from tempering.pool import TaskPool
from tempering.scheduler.global_ import GlobalScheduler
from tempering.reward.graders import check_scorers
from tempering.records import Group
from tempering.rollout import RolloutBatch, RolloutService, RolloutSpec
from tempering.rollout.replicas import WeightSync
from tempering.runtime import Resources, StopRequest, threads_per_process
from tempering.runtime.elastic import ElasticPolicy
from tempering.runtime.factory import open_runtime
from tempering.sandbox import telemetry as sandbox_log
from tempering.tokenizer import Tokenizer, char_tokenizer, load_tokenizer
from tempering.trainer import StepStats, Trainer
from tempering.trainer.group import TrainerGroup
from tempering.trainer.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from tempering.trainer.recompute import recompute_blocks
from tempering.trainer.distributed import read_shards
from tempering.trainer.sft import fitting, sft_warmup
from tempering.weights.shards import ShardSource


@dataclass
class RunState:
    """What a checkpoint carries of the run's progress (state.json, with the scheduler's state)."""

    step: int = 0
    version: int = 0  # the policy version engines serve
    wall_seconds: float = 0.0  # of earlier invocations, before a --resume
    baseline: JSONObject | None = None  # the baseline evaluation (EvalResult as a dict); None: not yet

    @classmethod
    def from_json(cls, state: JSONObject) -> RunState:
        return cls(state["step"], state["version"], state["wall_seconds"], state["baseline"])


@dataclass
class Run:
    cfg: Config
    dir: Path
    tokenizer: Tokenizer
    model: Decoder
    trainer: Trainer | TrainerGroup  # a group when runtime.trainer_ranks > 1 (from the RL loop on)
    scheduler: GlobalScheduler  # owns the task pool
    advantage: AdvantageSpec  # the buffer's; gae is computed by the trainer with its critic
    state: RunState
    started: float  # time.monotonic() when this invocation started
    threads: int  # torch threads of each process
    shards: Path | None = None  # a sharded checkpoint resumed from: the trainer group loads it once started

    @property
    def policy(self) -> Decoder | Merged:
        """The policy as engines load it: with LoRA adapters, merged into the base's weights."""
        return Merged(self.model) if adapters(self.model) else self.model

    @property
    def wall_seconds(self) -> float:
        """Seconds of the run so far, earlier invocations (before a --resume) included."""
        return self.state.wall_seconds + time.monotonic() - self.started


def train(cfg: Config, resume: bool = False) -> JSONObject:
    started = time.monotonic()
    with StopRequest(cfg.run.max_seconds, started) as stop:
        run = prepare(cfg, resume, started)
        if run.state.baseline is None:
            warm_up(run, stop)
        runtime = open_runtime(cfg.runtime)
        try:
            sync = None
            if cfg.runtime.trainer_ranks > 1:  # from the warmed-up (or restored) single-process trainer
                ask = Resources(cpus=1, custom=dict(cfg.runtime.trainer_resources))  # as a replica asks
                # engines on this machine read every rank's own shards: nothing is gathered to publish
                shards = None if runtime.remote else run.dir / "weights"
                run.trainer = TrainerGroup(run.model, run.trainer, cfg.runtime.trainer_ranks, run.threads,
                                           cfg.run.stall_timeout_s, runtime, ask, shards)
                if run.shards is not None:  # each rank reads its own shards (resharded at another count)
                    run.trainer.load(run.shards)
                if shards is not None:
                    sync = WeightSync(run.trainer.publisher(), ShardSource(shards))
            with RolloutService(rollout_spec(run), run.policy, run.state.version, run.scheduler, runtime,
                                cfg.runtime.replicas, cfg.runtime.replica_resources,
                                cfg.runtime.max_replicas, elastic_policy(cfg.runtime), sync) as rollout:
                if run.state.baseline is None:
                    run.state.baseline = dataclasses.asdict(run_eval(run, rollout, "baseline"))
                if not stop.is_set():
                    rl_loop(run, rollout, stop)  # it ends with the final checkpoint
                else:
                    checkpoint(run)
                final = run_eval(run, rollout, "final")
                replicas = rollout.report()
        finally:
            try:
                if isinstance(run.trainer, TrainerGroup):  # first: its ranks are the runtime's workers
                    run.trainer.close()
            finally:
                runtime.close()
        # the embedded default's one replica says nothing new; more replicas, or Ray, say where they ran
        return finish(run, final, stop.reason, replicas if cfg.runtime != RuntimeConfig() else None)


def rl_loop(run: Run, rollout: RolloutService, stop: StopRequest) -> None:
    """Until run.steps, or until `stop` (a signal or the time budget) at a step boundary."""
    cfg = run.cfg
    lineage = LineageStore(run.dir, cfg.run.stall_timeout_s)  # lineage.sqlite and samples.jsonl
    overlong = Overlong(cfg.algorithm.overlong_buffer, cfg.algorithm.overlong_penalty, cfg.rollout.max_tokens)
    buffer = Buffer(cfg.buffer, run.advantage, lineage, run.tokenizer.pad_id, overlong)
    metrics = Metrics(run.dir, cfg.metrics, cfg.run.steps, run.state.step)
    first = run.state.step
    try:
        while run.state.step < cfg.run.steps and not stop.is_set():
            tick = time.perf_counter()
            batch_in = rollout.next_batch(stop)
            if batch_in is None:
                break
            waited = time.perf_counter() - tick
            batch, groups, acct = buffer.make_batch(batch_in.groups, run.state.version, run.state.step)
            stats = run.trainer.rl_step(batch) if batch is not None else None
            run.state.step += 1
            run.state.version += 1
            published = rollout.publish(run.policy, run.state.version)
            timings = {"step": time.perf_counter() - tick, "wait_rollout": waited, "rollout": batch_in.seconds,
                       **{f"rollout_{k}": v for k, v in batch_in.runner_seconds.items()},
                       # weight sync: this publish, the workers' fetches (blobs, broadcasts), pulls and drains
                       # since the previous batch; since the workers started: engine busy seconds (idle =
                       # 1 - busy/wall), versions loaded
                       "weight_publish": published, "weight_fetch": batch_in.sync.fetch_s,
                       "weight_pull": batch_in.sync.pull_s, "weight_drain": batch_in.sync.drain_s,
                       "engine_busy": batch_in.engine_busy_s, "syncs": batch_in.sync_total.syncs}
            if batch_in.startup_s is not None:
                timings["worker_startup"] = batch_in.startup_s
            step = run.state.step
            if cfg.eval.every and step % cfg.eval.every == 0 and step < cfg.run.steps:
                t0 = time.perf_counter()
                result = run_eval(run, rollout, f"step-{step:06d}")
                timings["eval"] = time.perf_counter() - t0
                metrics.log_eval(step, result.accuracy, result.per_domain)
            metrics.log(step, step_record(run, batch_in, groups, acct, stats, timings))
            # after the step's row, its seconds added to it: a kill between the two must not leave a
            # checkpoint whose step has no row (the resume would go on past it, the row never written)
            if cfg.run.checkpoint_every and step % cfg.run.checkpoint_every == 0 and step < cfg.run.steps:
                metrics.amend(step, {"seconds": {"checkpoint": timed(checkpoint, run)}})
        seconds = timed(checkpoint, run)  # the final one, in the last step's row
        if run.state.step > first:
            metrics.amend(run.state.step, {"seconds": {"checkpoint": seconds}})
    finally:
        metrics.close()
        lineage.close()


# ---------------------------------------------------------------------------------------------
# Setting up


def prepare(cfg: Config, resume: bool, started: float) -> Run:
    run_dir = cfg.run_dir
    ckpt = latest_checkpoint(run_dir) if resume else None
    if resume and ckpt is None:
        raise UserError(f"--resume: no checkpoint in {run_dir / 'checkpoints'}")
    if not resume and (run_dir / "metrics.jsonl").exists():
        raise UserError(f"{run_dir} already holds a run; pick another --run.name or pass --resume")
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.json").write_text(json.dumps(to_dict(cfg), indent=2))
    # the trainer and the rollout workers that share this machine's cores (a cluster's run elsewhere)
    on_this_machine = cfg.runtime.kind == "local" or cfg.runtime.address == "local"
    here = cfg.runtime.replicas + cfg.runtime.trainer_ranks if on_this_machine else 1  # 1: rank 0
    threads = threads_per_process(cfg.run.threads, processes=here)
    if cfg.runtime.trainer_ranks > 1 and cfg.algorithm.advantage == "gae":
        raise ConfigError("runtime.trainer_ranks > 1: algorithm.advantage = 'gae' needs a critic, which the FSDP "
                          "trainer does not shard yet")
    staleness = cfg.buffer.max_staleness
    if cfg.run.deterministic:
        check_deterministic(cfg)
        staleness = 0
        print("[tempering] run.deterministic: each batch is generated by the version just published (staleness 0, "
              "no overlap with training); the rollout worker waits for tools and scores at every engine step",
              flush=True)
    torch.set_num_threads(threads)
    torch.manual_seed(cfg.run.seed)
    state, saved = RunState(), {}
    trainer_state = None
    if ckpt is not None:
        model, trainer_state, saved = load_checkpoint(ckpt)
        state = RunState.from_json(saved)
    scheduler = GlobalScheduler(cfg.tasks, cfg.scheduler, cfg.rollout.tasks_per_step, staleness,
                                cfg.buffer.queue_size, first_batch=state.step, last_batch=cfg.run.steps,
                                tokens_per_group=cfg.rollout.samples_per_task * cfg.rollout.max_tokens / 2,
                                refills=cfg.buffer.dynamic_sampling)
    if "scheduler" in saved:  # pass rates, adaptive weights, levels and usage as the checkpoint left them
        scheduler.load_state_dict(saved["scheduler"])
    pool = scheduler.pool
    check_scorers(cfg.reward, list(pool.weights))  # before anything starts: a bad grader is a config error
    if ckpt is not None:
        tokenizer = load_tokenizer(ckpt / "model")
        # Steps after the checkpoint are redone: forget what the interrupted run logged for them.
        rewind_jsonl(run_dir / "metrics.jsonl", lambda row: row["step"] <= state.step)
        rewind_jsonl(run_dir / "samples.jsonl", lambda row: row["step"] < state.step)
        rewind_lineage(run_dir, state.step)
        sandbox_log.rewind(run_dir, state.step)
    else:
        tokenizer = build_tokenizer(cfg.tokenizer, cfg.model, pool)
        model = build_policy(cfg.model, tokenizer, cfg.run.seed)
    tokenizer.save(run_dir / "tokenizer")
    if cfg.trainer.lora_rank:
        model = with_adapters(cfg, run_dir, model, ckpt)
    if cfg.trainer.gradient_checkpointing:
        recompute_blocks(model)
    trainer = Trainer(model, cfg.trainer, cfg.algorithm, cfg.rollout.temperature, cfg.rollout.max_tokens,
                      total_steps=cfg.run.steps)
    shards = None
    if trainer_state is not None:
        trainer.load_state_dict(trainer_state)
    elif ckpt is not None and cfg.runtime.trainer_ranks > 1:
        shards = ckpt
    elif ckpt is not None:  # a sharded checkpoint resumed in one process: DCP reads the full tensors
        read_shards(ckpt, trainer)
    advantage = get_advantage(cfg.algorithm.advantage)  # names were checked when the config loaded
    unknown = sorted(set(cfg.reward.domain_weights) - set(cfg.tasks.weights))
    if unknown:
        raise ConfigError(f"reward.domain_weights.{unknown[0]}: not a domain of tasks.weights "
                          f"({', '.join(sorted(cfg.tasks.weights))})")
    return Run(cfg, run_dir, tokenizer, model, trainer, scheduler, advantage, state, started, threads, shards)


def with_adapters(cfg: Config, run_dir: Path, model: Decoder, ckpt: Path | None) -> Decoder:
    """trainer.lora_rank > 0: the base model with adapters on it. A new run keeps its base in
    `<run>/base` (it never changes); a resumed one takes that base and its checkpoint's adapters
    (its `model/` holds the merged weights, for transformers)."""
    if cfg.runtime.trainer_ranks > 1 or cfg.algorithm.advantage == "gae":
        raise ConfigError("trainer.lora_rank > 0 runs in one trainer process without a critic; runtime.trainer_ranks "
                          f"is {cfg.runtime.trainer_ranks} and algorithm.advantage {cfg.algorithm.advantage!r}")
    if ckpt is None:
        save_hf(model, run_dir / "base")
    else:
        model = load_hf(run_dir / "base")
    t = cfg.trainer
    apply_lora(model, t.lora_rank, t.lora_alpha, t.lora_targets, seed=cfg.run.seed)
    if ckpt is not None:
        load_peft(model, ckpt / "adapter")
    return model


def elastic_policy(cfg: RuntimeConfig) -> ElasticPolicy | None:
    """runtime.min_replicas >= 1: the policy that adds and drains replicas between the bounds."""
    if cfg.min_replicas == 0:
        return None
    return ElasticPolicy(cfg.min_replicas, cfg.max_replicas or cfg.replicas, cfg.scale_up_wait, cfg.scale_down_idle,
                         cfg.scale_patience, cfg.scale_cooldown)


def check_deterministic(cfg: Config) -> None:
    """What run.deterministic cannot repeat: several replicas (whose groups race), dynamic
    sampling (its re-drawn groups are ordered as they end), vLLM (its own scheduling)."""
    for ok, key, value in ((cfg.runtime.replicas == 1 and cfg.runtime.max_replicas == 0, "runtime.replicas",
                            f"{cfg.runtime.replicas} (max_replicas {cfg.runtime.max_replicas})"),
                           (cfg.buffer.dynamic_sampling == 0, "buffer.dynamic_sampling", cfg.buffer.dynamic_sampling),
                           (cfg.engine.backend == "tempering", "engine.backend", repr(cfg.engine.backend))):
        if not ok:
            raise ConfigError(f"run.deterministic = true needs one rollout replica, no dynamic sampling and "
                              f"Tempering's own engine; {key} is {value}")


def build_tokenizer(cfg: TokenizerConfig, model: ModelConfig, pool: TaskPool) -> Tokenizer:
    if cfg.path:
        return load_tokenizer(cfg.path)
    if model.path:
        return load_tokenizer(local_model(model.path))
    free_text = sorted(name for name, d in pool.domains.items() if not d.alphabet)
    if free_text:
        # A model from scratch on free-text domains (a smoke run of many domains): a character
        # tokenizer over printable ASCII spells most of it; anything else reads as <unk>.
        print(f"[tempering] warning: {len(free_text)} domains of the mix ({free_text[0]}, ...) are free text: a "
              "character tokenizer over printable ASCII stands in; set model.path or tokenizer.path for a real one",
              file=sys.stderr, flush=True)
        return char_tokenizer(pool.alphabet + string.printable)
    return char_tokenizer(pool.alphabet)


def build_policy(cfg: ModelConfig, tokenizer: Tokenizer, seed: int) -> Decoder:
    if cfg.path:
        model = load_hf(local_model(cfg.path))
        if tokenizer.vocab_size > model.arch.vocab_size:
            raise UserError(f"model.path {cfg.path}: vocab_size {model.arch.vocab_size} is smaller than "
                             f"the tokenizer's {tokenizer.vocab_size}")
        return model
    fields = {f.name for f in dataclasses.fields(Arch)}
    arch = Arch(vocab_size=tokenizer.vocab_size, eos_token_id=tokenizer.eos_id, pad_token_id=tokenizer.pad_id,
                **{k: v for k, v in dataclasses.asdict(cfg).items() if k in fields})
    return build_model(arch, seed)


def rollout_spec(run: Run) -> RolloutSpec:
    cfg = run.cfg
    sandbox = cfg.sandbox
    if run.scheduler.pool.needs_sandbox and not run.scheduler.pool.needs_toolchain and sandbox.toolchain:
        print("[tempering] sandbox: no domain of the mix uses the toolchain; it runs without one", flush=True)
        sandbox = dataclasses.replace(sandbox, toolchain="")
    return RolloutSpec(
        arch=run.model.arch, run_dir=str(run.dir), tokenizer_dir=str(run.dir / "tokenizer"), engine=cfg.engine,
        sandbox=sandbox, scheduler=cfg.scheduler, plugins=cfg.tasks.plugins,
        needs_sandbox=run.scheduler.pool.needs_sandbox, rollout=cfg.rollout, reward=cfg.reward,
        deterministic=cfg.run.deterministic, groups_per_batch=cfg.rollout.tasks_per_step,
        eval_max_tokens=cfg.eval.max_tokens, seed=cfg.run.seed, first_batch=run.state.step, threads=run.threads,
        stall_timeout_s=cfg.run.stall_timeout_s, spawned_at=time.time())


# ---------------------------------------------------------------------------------------------
# Phases around the loop


def warm_up(run: Run, stop: StopRequest) -> None:
    sft = run.cfg.sft
    if sft.steps == 0:
        return
    sft_trainer = Trainer(run.model, dataclasses.replace(run.cfg.trainer, lr=sft.lr, warmup_steps=0,
                                                         schedule="constant"))
    with open(run.dir / "sft.jsonl", "w") as log, \
            progress_bar(run.cfg.metrics, total=sft.steps, desc="sft") as bar:

        started = time.perf_counter()

        def on_step(step: int, stats: StepStats) -> None:
            # flushed each step: a real model's warm-up takes minutes a step on a CPU, and this
            # file is how one without a terminal sees it move
            log.write(json.dumps({"step": step + 1, "loss": stats.loss,
                                  "seconds": round(time.perf_counter() - started, 3)}) + "\n")
            log.flush()
            bar.update(1)
            bar.set_postfix(loss=f"{stats.loss:.3g}", refresh=False)

        examples = run.scheduler.pool.sft_examples()
        kept = fitting(examples, run.tokenizer, run.model.arch.max_position_embeddings)
        if len(kept) < len(examples):
            print(f"[tempering] warm-up: {len(examples) - len(kept)} of {len(examples)} SFT examples are longer than "
                  f"the model's context ({run.model.arch.max_position_embeddings} positions) and are left out",
                  flush=True)
        done = sft_warmup(sft_trainer, run.tokenizer, kept, sft.steps, sft.batch_size,
                          run.cfg.run.seed, on_step, stop.is_set, tool_format(run.cfg.rollout.tool_parser, run.tokenizer))
    if done < sft.steps:
        print(f"[tempering] warm-up ended after {done} of {sft.steps} SFT steps ({stop.reason})", flush=True)


def run_eval(run: Run, rollout: RolloutService, label: str) -> EvalResult:
    """The held-out evaluation of the version published last, run by the rollout worker (on its
    engine and sandbox; the trainer process starts neither)."""
    result = rollout.evaluate(label)
    (run.dir / f"eval_{label}.json").write_text(json.dumps(dataclasses.asdict(result), indent=2))
    print(f"[tempering] {label} held-out accuracy {result.accuracy:.3f} "
          + " ".join(f"{d}={a:.2f}" for d, a in sorted(result.per_domain.items())), flush=True)
    return result


def checkpoint(run: Run) -> None:
    """Rank 0's full model as an HF folder always (gathered now if the ranks published their own
    shards); the trainer's state as one file (gathered on rank 0), or, with
    `runtime.checkpoint_format = "sharded"`, as each rank's shards."""
    state = {**dataclasses.asdict(run.state), "wall_seconds": run.wall_seconds,
             "scheduler": run.scheduler.state_dict()}
    if isinstance(run.trainer, TrainerGroup):
        run.trainer.refresh()  # rank 0's full model, exported as the HF folder
    if isinstance(run.trainer, TrainerGroup) and run.cfg.runtime.checkpoint_format == "sharded":
        save_checkpoint(run.dir, run.model, run.tokenizer, None, state, shards=run.trainer.save)
    else:
        save_checkpoint(run.dir, run.model, run.tokenizer, run.trainer.state_dict(), state)


def timed(fn, *args) -> float:
    """Seconds `fn(*args)` took."""
    t0 = time.perf_counter()
    fn(*args)
    return time.perf_counter() - t0


def finish(run: Run, final: EvalResult, stopped: str, replicas: dict[str, object] | None = None) -> JSONObject:
    baseline = run.state.baseline
    summary = {
        "baseline_accuracy": baseline["accuracy"], "final_accuracy": final.accuracy,
        "baseline_per_domain": baseline["per_domain"], "final_per_domain": final.per_domain,
        "steps": run.state.step, "wall_seconds": run.wall_seconds,
        # why the run ended before run.steps: "SIGINT", "SIGTERM" or "run.max_seconds"
        "stopped": stopped or None,
        "samples": sample_fates(run.dir / "samples.jsonl"), "run_dir": str(run.dir),
    }
    if replicas is not None:  # nodes they ran on, those lost and why, groups re-placed and set aside
        summary["replicas"] = replicas
    if isinstance(run.trainer, TrainerGroup):  # where ranks 1.. ran (a node id on Ray)
        summary["trainer_ranks"] = run.trainer.nodes
    if run.cfg.metrics.plot and (run.dir / "metrics.jsonl").exists():
        plot_rewards(run.dir / "metrics.jsonl", run.dir / "reward_per_domain.png")
        summary["plot"] = str(run.dir / "reward_per_domain.png")
    (run.dir / "summary.json").write_text(json.dumps(summary, indent=2))
    return summary


def episode_record(groups: list[Group]) -> JSONObject:
    """How this step's episodes ended and what their tool calls did (multi-turn domains only)."""
    samples = [t for g in groups for t in g.trajectories]
    calls = [c for t in samples for c in t.tool_calls]
    record: JSONObject = {"finish": dict(Counter(t.finish_reason for t in samples))}
    if any(t.turns for t in samples):
        record["turns"] = sum(sum(x.role == "assistant" for x in t.turns) or 1 for t in samples) / len(samples)
        record["tools"] = {"calls": len(calls), "failed": sum(c.failed for c in calls),
                           **Counter(c.error_kind for c in calls if c.error_kind)}
    return record


def sample_fates(path: Path) -> dict[str, int]:
    fates: dict[str, int] = defaultdict(int)
    if path.exists():
        for line in path.read_text().splitlines():
            fates[json.loads(line)["fate"]] += 1
    return dict(fates)


def step_record(run: Run, rollout: RolloutBatch, groups: list[Group], acct: Accounting,
                stats: StepStats | None, seconds: dict[str, float]) -> JSONObject:
    by_domain: dict[str, list[float]] = defaultdict(list)
    solved: dict[str, list[float]] = defaultdict(list)
    components: dict[str, list[float]] = defaultdict(list)
    for g in rollout.groups:
        by_domain[g.task.domain].extend(r.total for r in g.rewards if not r.failed)
        solved[g.task.domain].extend(r.outcome for r in g.rewards if not r.failed)
        for r in g.rewards:
            for name, value in r.components.items() if not r.failed else ():
                components[name].append(float(value))
    everything = [x for v in by_domain.values() for x in v]
    version = run.state.version - 1  # the version this step trained from
    staleness = [version - t.oldest_version for g in groups for t in g.trajectories]
    return {
        "time": time.time(), "elapsed_s": run.wall_seconds,  # wall clock; elapsed counts earlier invocations
        "version": run.state.version,
        "reward": {"mean": sum(everything) / max(len(everything), 1),
                   "domain": {d: sum(v) / len(v) for d, v in by_domain.items() if v}},
        "outcome": {d: sum(v) / len(v) for d, v in solved.items() if v},  # this step's samples
        # each reward component's mean over the samples that have one (verifiers', rm_*, judge_*)
        "component": {k: sum(v) / len(v) for k, v in sorted(components.items())},
        # per domain: target and achieved share, adaptive weight, level, pass rate and learning
        # signal over the last scheduler.window groups; the sandbox node's queue and waits
        "scheduler": rollout.scheduler,
        **({"sandbox_queue": dataclasses.asdict(rollout.node)} if rollout.node else {}),
        **(dataclasses.asdict(stats) if stats else {"skipped": 1}),
        "tokens_per_s": rollout.generated_tokens / max(rollout.seconds, 1e-9),
        **episode_record(rollout.groups),
        "staleness": {"mean": sum(staleness) / max(len(staleness), 1), "max": max(staleness, default=0)},
        "samples": {"trained": acct.trained, **{f"dropped_{k}": v for k, v in acct.dropped.items()},
                    "refilled_groups": rollout.refilled,
                    **({"requeued_groups": rollout.requeued} if rollout.requeued else {})},
        # with more than the one replica: the groups each sent (spread, and when one came or went)
        **({"replicas": rollout.replicas} if set(rollout.replicas) != {"rollout-0"} else {}),
        # runtime.min_replicas >= 1: replicas taking groups, the count wanted, the trainer's wait and
        # the engines' idle fractions, and the decision (+1 add, -1 drain, 0 hold) with its reason's
        # code (runtime.elastic.REASONS; the changes' reasons in words are in the summary)
        **({"elastic": rollout.elastic} if rollout.elastic is not None else {}),
        # Where a step's time goes: a trainer that mostly waits is rollout-bound. The worker's
        # start-up (first step), checkpoint writes and held-out evaluations are timed apart.
        "seconds": seconds,
    }
