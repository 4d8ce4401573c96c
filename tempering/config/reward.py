"""The reward service's config: `[reward]` (components, weights, verifiers' deadline, scorers by
domain) with its reward models (`[reward.models.<name>]`) and LLM judges (`[reward.judges.<name>]`)."""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass, field
from typing import Annotated, Literal

from tempering.config.checks import NONBLANK, Holds, Match, Range, _require, check_fields

# the name of a reward model or judge, as `rm_<name>` and `judge_<name>` use it
ScorerName = Annotated[str, Match(r"[a-z0-9_]+", "a name of lowercase letters, digits and '_'")]


def _http_url(text: str) -> bool:
    url = urllib.parse.urlsplit(text)
    return url.scheme in ("http", "https") and bool(url.hostname)


@dataclass(frozen=True)
class RewardModelConfig:
    """[reward.models.<name>]: a scalar reward model, served in its own process; its score is
    the component `rm_<name>`."""

    path: Annotated[str, Match(NONBLANK, "a folder with the reward model")] = ""  # an HF folder: *ForSequenceClassification weights (one label) and tokenizer.json
    max_batch_tokens: Annotated[int, Range(gt=0)] = 8192  # padded tokens in one forward pass (length-bucketed)
    max_wait_ms: Annotated[float, Range(ge=0)] = 5.0  # how long the worker gathers requests from many samples before it runs them
    cache_size: Annotated[int, Range(ge=0)] = 100_000  # scores kept, keyed by text and model version; 0 = none
    threads: Annotated[int, Range(ge=1)] = 1  # torch threads of the reward-model process
    timeout_s: Annotated[float, Range(gt=0)] = 60.0  # a scoring request's deadline (then the sample's reward fails)
    normalize: Literal["none", "group"] = "none"  # "group": z-score within the sample's group

    def __post_init__(self) -> None:
        check_fields(self, "reward.models")


@dataclass(frozen=True)
class JudgeConfig:
    """[reward.judges.<name>]: a language model that grades samples by a rubric over an
    OpenAI-compatible endpoint (`tempering serve` is one); its score is `judge_<name>`."""

    base_url: Annotated[str, Holds(_http_url, "an http(s) URL such as http://127.0.0.1:8000/v1")] = ""  # as OpenAI clients take it: "http://127.0.0.1:8000/v1"
    model: Annotated[str, Match(NONBLANK, "a model id")] = ""  # the model id the endpoint serves
    # "outcome" or "process" (built in), "domain" (the criteria of the sample's domain), or criteria as text
    rubric: Annotated[str, Match(NONBLANK, "a rubric name or criteria as text")] = "outcome"
    timeout_s: Annotated[float, Range(gt=0)] = 60.0  # one request's deadline
    retries: Annotated[int, Range(ge=0)] = 2  # further attempts after a failed one (connection, timeout, 429, 5xx)
    max_in_flight: Annotated[int, Range(ge=1)] = 16  # requests in flight at once
    temperature: Annotated[float, Range(ge=0)] = 0.0
    max_tokens: Annotated[int, Range(ge=1)] = 512  # of the judge's reply; a reply cut off before its SCORE line is a parse failure
    cache_size: Annotated[int, Range(ge=0)] = 4096  # parsed results kept; 0 = none
    backoff_s: Annotated[float, Range(ge=0)] = 0.5  # wait before the first retry; doubles per retry (up to 8 s), with jitter
    api_key_env: str = ""  # an environment variable holding a bearer token (hosted endpoints); "" = none
    normalize: Literal["none", "group"] = "none"  # "group": z-score within the sample's group

    def __post_init__(self) -> None:
        check_fields(self, "reward.judges")


@dataclass(frozen=True)
class RewardConfig:
    timeout_s: Annotated[float, Range(gt=0)] = 10.0  # a verifier slower than this is a failure, never a training signal
    workers: Annotated[int, Range(gt=0)] = 4  # keep <= sandbox.workers: code verifiers beyond the warm pool start cold
    # total = sum of weight x component; components without a weight are logged, not rewarded
    weights: dict[str, float] = field(default_factory=lambda: {"outcome": 1.0, "partial": 0.5, "executes": 0.25})
    # a domain's own weights, over `weights`: e.g. { terminal = { outcome = 1.0, valid_calls = 0.1 } }
    domain_weights: dict[str, dict[str, float]] = field(default_factory=dict)
    models: dict[ScorerName, RewardModelConfig] = field(default_factory=dict)  # [reward.models.<name>]
    judges: dict[ScorerName, JudgeConfig] = field(default_factory=dict)  # [reward.judges.<name>]
    # which domains get which model and judge components: domain, family or glob -> names such
    # as ["rm_quality", "judge_process"]; a domain matched by several keys gets all their names
    scorers: dict[str, list[str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_fields(self, "reward")
        known = {f"rm_{n}" for n in self.models} | {f"judge_{n}" for n in self.judges}
        for key, names in self.scorers.items():
            for n in names:
                _require(n in known, f"reward.scorers.{key}", "names of configured models and judges (" +
                         (", ".join(sorted(known)) or "none configured: add [reward.models.<name>] or "
                          "[reward.judges.<name>]") + ")", n)
