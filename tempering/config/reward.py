"""The reward service's config: `[reward]` (components, weights, verifiers' deadline, scorers by
domain) with its reward models (`[reward.models.<name>]`) and LLM judges (`[reward.judges.<name>]`)."""

from __future__ import annotations

import re
import urllib.parse
from dataclasses import dataclass, field
from typing import Literal

from tempering.config.checks import _require, _require_choices


@dataclass(frozen=True)
class RewardModelConfig:
    """[reward.models.<name>]: a scalar reward model, served in its own process; its score is
    the component `rm_<name>`."""

    path: str = ""  # an HF folder: *ForSequenceClassification weights (one label) and tokenizer.json
    max_batch_tokens: int = 8192  # padded tokens in one forward pass (length-bucketed)
    max_wait_ms: float = 5.0  # how long the worker gathers requests from many samples before it runs them
    cache_size: int = 100_000  # scores kept, keyed by text and model version; 0 = none
    threads: int = 1  # torch threads of the reward-model process
    timeout_s: float = 60.0  # a scoring request's deadline (then the sample's reward fails)
    normalize: Literal["none", "group"] = "none"  # "group": z-score within the sample's group

    def __post_init__(self) -> None:
        _require_choices(self, "reward.models")
        _require(bool(self.path), "reward.models.path", "a folder with the reward model", self.path)
        _require(self.max_batch_tokens > 0, "reward.models.max_batch_tokens", "an integer > 0", self.max_batch_tokens)
        _require(self.max_wait_ms >= 0, "reward.models.max_wait_ms", "a number >= 0", self.max_wait_ms)
        _require(self.cache_size >= 0, "reward.models.cache_size", "an integer >= 0 (0 = none)", self.cache_size)
        _require(self.threads >= 1, "reward.models.threads", "an integer >= 1", self.threads)
        _require(self.timeout_s > 0, "reward.models.timeout_s", "a number > 0", self.timeout_s)


@dataclass(frozen=True)
class JudgeConfig:
    """[reward.judges.<name>]: a language model that grades samples by a rubric over an
    OpenAI-compatible endpoint (`tempering serve` is one); its score is `judge_<name>`."""

    base_url: str = ""  # as OpenAI clients take it: "http://127.0.0.1:8000/v1"
    model: str = ""  # the model id the endpoint serves
    # "outcome" or "process" (built in), "domain" (the criteria of the sample's domain), or criteria as text
    rubric: str = "outcome"
    timeout_s: float = 60.0  # one request's deadline
    retries: int = 2  # further attempts after a failed one (connection, timeout, 429, 5xx)
    max_in_flight: int = 16  # requests in flight at once
    temperature: float = 0.0
    max_tokens: int = 512  # of the judge's reply; a reply cut off before its SCORE line is a parse failure
    cache_size: int = 4096  # parsed results kept; 0 = none
    backoff_s: float = 0.5  # wait before the first retry; doubles per retry (up to 8 s), with jitter
    api_key_env: str = ""  # an environment variable holding a bearer token (hosted endpoints); "" = none
    normalize: Literal["none", "group"] = "none"  # "group": z-score within the sample's group

    def __post_init__(self) -> None:
        _require_choices(self, "reward.judges")
        url = urllib.parse.urlsplit(self.base_url)
        _require(url.scheme in ("http", "https") and bool(url.hostname), "reward.judges.base_url",
                 "an http(s) URL such as http://127.0.0.1:8000/v1", self.base_url)
        _require(bool(self.model), "reward.judges.model", "a model id", self.model)
        _require(bool(self.rubric.strip()), "reward.judges.rubric", "a rubric name or criteria as text", self.rubric)
        _require(self.timeout_s > 0, "reward.judges.timeout_s", "a number > 0", self.timeout_s)
        _require(self.retries >= 0, "reward.judges.retries", "an integer >= 0", self.retries)
        _require(self.max_in_flight >= 1, "reward.judges.max_in_flight", "an integer >= 1", self.max_in_flight)
        _require(self.temperature >= 0, "reward.judges.temperature", "a number >= 0", self.temperature)
        _require(self.max_tokens >= 1, "reward.judges.max_tokens", "an integer >= 1", self.max_tokens)
        _require(self.cache_size >= 0, "reward.judges.cache_size", "an integer >= 0 (0 = none)", self.cache_size)
        _require(self.backoff_s >= 0, "reward.judges.backoff_s", "a number >= 0", self.backoff_s)


@dataclass(frozen=True)
class RewardConfig:
    timeout_s: float = 10.0  # a verifier slower than this is a failure, never a training signal
    workers: int = 4  # keep <= sandbox.workers: code verifiers beyond the warm pool start cold
    # total = sum of weight x component; components without a weight are logged, not rewarded
    weights: dict[str, float] = field(default_factory=lambda: {"outcome": 1.0, "partial": 0.5, "executes": 0.25})
    # a domain's own weights, over `weights`: e.g. { terminal = { outcome = 1.0, valid_calls = 0.1 } }
    domain_weights: dict[str, dict[str, float]] = field(default_factory=dict)
    models: dict[str, RewardModelConfig] = field(default_factory=dict)  # [reward.models.<name>]
    judges: dict[str, JudgeConfig] = field(default_factory=dict)  # [reward.judges.<name>]
    # which domains get which model and judge components: domain, family or glob -> names such
    # as ["rm_quality", "judge_process"]; a domain matched by several keys gets all their names
    scorers: dict[str, list[str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _require(self.timeout_s > 0, "reward.timeout_s", "a number > 0", self.timeout_s)
        _require(self.workers > 0, "reward.workers", "an integer > 0", self.workers)
        for section, names in (("models", self.models), ("judges", self.judges)):
            for name in names:
                _require(re.fullmatch(r"[a-z0-9_]+", name) is not None, f"reward.{section}.{name}",
                         "a name of lowercase letters, digits and '_'", name)
        known = {f"rm_{n}" for n in self.models} | {f"judge_{n}" for n in self.judges}
        for key, names in self.scorers.items():
            for n in names:
                _require(n in known, f"reward.scorers.{key}", "names of configured models and judges (" +
                         (", ".join(sorted(known)) or "none configured: add [reward.models.<name>] or "
                          "[reward.judges.<name>]") + ")", n)
