"""The config tree: frozen dataclasses loaded from TOML with `--section.key=value` overrides.

The sections live in `sections` (and `reward`, `serve`, `parallelize`), their checks in
`checks`, loading and overrides in `loader`; this package re-exports what the rest imports.
"""

from tempering.config.checks import ConfigError, Range, _require  # noqa: F401
from tempering.config.loader import load_config, to_dict  # noqa: F401
from tempering.config.parallelize import ParallelizeConfig  # noqa: F401
from tempering.config.reward import JudgeConfig, RewardConfig, RewardModelConfig  # noqa: F401
from tempering.config.sections import (  # noqa: F401
    BINDABLE, KEYS_REPLACED, AlgorithmConfig, BufferConfig, Config, EngineConfig, EvalConfig, MetricsConfig,
    ModelConfig, RolloutConfig, RunConfig, RuntimeConfig, SandboxConfig, SchedulerConfig, SftConfig, TasksConfig,
    TokenizerConfig, TrainerConfig)
from tempering.config.serve import ServeConfig, TenantConfig  # noqa: F401
