"""`Graders`: the reward models and judges a run configures, applied to the domains that
`reward.scorers` maps them to, as named reward components beside the verifiers'.

`[reward.models.<name>]` gives the component `rm_<name>` (a scalar reward model served in its own
process, `rm_worker.RewardModelWorker`, which batches the texts of every group scored at the same
time); `[reward.judges.<name>]` gives `judge_<name>` (a rubric-graded chat model behind an
OpenAI-compatible endpoint, `judge.Judge`). What they see of a sample is its domain's
`grade_item` when it has one (a part's measurements, a conclusion next to its reference), else its
final answer; a judge with the "process" rubric sees the episode's transcript instead, and one
with the "domain" rubric grades by the sample's domain's own criteria. A reward model scores
`render_text(prompt, answer)` in its own tokenizer's format.

A grader that cannot grade a sample (a dead or slow worker, a text longer than the model's
context, an endpoint that fails or a reply the parser cannot read) fails that sample's reward: it
is an infrastructure failure, never a training signal. With `normalize = "group"` a component is
z-scored among the samples of one task scored together (a group): reward models' raw scores have
no fixed scale, and GRPO compares samples within a group anyway; the raw score is then logged
beside it as `<component>_raw` (no weight unless one is given). Weighting is the service's job.
Models and judges start when the service does, for the components some domain uses.
"""

from __future__ import annotations

import concurrent.futures as cf
import statistics
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Sequence

from tempering.config import RewardConfig
from tempering.errors import UserError
from tempering.records import Task, Trajectory
from tempering.reward.judge import Judge, worst_case_s
from tempering.reward.reward_model import render_text
from tempering.reward.rm_worker import RewardModelWorker
from tempering.reward.rubrics import DOMAIN_RUBRIC, Rubric, process_item
from tempering.verdict import InfrastructureError, JudgeItem, VerifierContext, outcome_item
from tempering.tasks.registry import get_domain, resolve_scorers
from tempering.tokenizer import load_tokenizer

SLACK_S = 5.0  # beyond a judge's own worst case: its futures always settle, this only guards bugs


class Graders:
    def __init__(self, cfg: RewardConfig):
        self.cfg = cfg
        self.plan = resolve_scorers(cfg.scorers)  # domain -> component names
        used = {n for names in self.plan.values() for n in names}
        self.models = {n: RewardModelWorker(c, n) for n, c in cfg.models.items() if f"rm_{n}" in used}
        try:
            self.rm_tokenizers = {n: load_tokenizer(cfg.models[n].path) for n in self.models}
            self.judges = {n: Judge(c) for n, c in cfg.judges.items() if f"judge_{n}" in used}
        except BaseException:
            self.close()
            raise
        self.seconds: Counter = Counter()  # per component: wall time of its calls, summed since `take_seconds`
        self._lock = threading.Lock()

    def take_seconds(self) -> dict[str, float]:
        with self._lock:
            taken, self.seconds = self.seconds, Counter()
        return {name: float(taken[name]) for name in sorted({n for names in self.plan.values() for n in names})}

    def components(self, domain: str) -> list[str]:
        return self.plan.get(domain, [])

    def grade(self, tasks: Sequence[Task], samples: Sequence[Trajectory],
              contexts: Sequence[VerifierContext]) -> list[dict[str, float] | InfrastructureError]:
        """Each sample's grader components, or the error that kept one of them from it."""
        out: list[dict[str, float] | InfrastructureError] = [{} for _ in tasks]
        wanted: dict[str, list[int]] = defaultdict(list)  # component -> the samples that get it
        for i, task in enumerate(tasks):
            for name in self.components(task.domain):
                wanted[name].append(i)
        for name, where in wanted.items():
            start = time.perf_counter()
            raw = self._component(name, [tasks[i] for i in where], [samples[i] for i in where],
                                  [contexts[i] for i in where])
            with self._lock:
                self.seconds[name] += time.perf_counter() - start
            named = {name: raw}
            if self._normalize(name) == "group":  # the raw score too, logged (no weight), to watch it move
                named = {name: within_groups([tasks[i] for i in where], raw), f"{name}_raw": raw}
            for key, values in named.items():
                for i, v in zip(where, values):
                    if isinstance(v, InfrastructureError):
                        out[i] = v
                    elif isinstance(out[i], dict):
                        out[i][key] = v
        return out

    def close(self) -> None:
        for worker in getattr(self, "models", {}).values():
            worker.close()
        for judge in getattr(self, "judges", {}).values():
            judge.close()

    # -- one component over the samples that get it --------------------------------------------
    def _component(self, name: str, tasks: Sequence[Task], samples: Sequence[Trajectory],
                   contexts: Sequence[VerifierContext]) -> list[float | InfrastructureError]:
        kind, _, key = name.partition("_")
        return (self._rm(key, tasks, samples, contexts) if kind == "rm"
                else self._judge(key, tasks, samples, contexts))

    def _normalize(self, name: str) -> str:
        kind, _, key = name.partition("_")
        return (self.cfg.models[key] if kind == "rm" else self.cfg.judges[key]).normalize

    def _rm(self, key: str, tasks, samples, contexts) -> list[float | InfrastructureError]:
        try:
            items = [grade_item(t, s, c, None) for t, s, c in zip(tasks, samples, contexts)]
            tok = self.rm_tokenizers[key]
            texts = [render_text(tok, it.prompt, it.answer or it.transcript) for it in items]
            return list(self.models[key].score(texts))
        except InfrastructureError as e:
            return [InfrastructureError(f"rm_{key}: {e}")] * len(tasks)

    def _judge(self, key: str, tasks, samples, contexts) -> list[float | InfrastructureError]:
        judge = self.judges[key]
        rubric_name = self.cfg.judges[key].rubric.strip()
        futures: list[cf.Future | InfrastructureError] = []
        for t, s, c in zip(tasks, samples, contexts):
            domain = get_domain(t.domain)
            rubric = None
            if rubric_name == DOMAIN_RUBRIC:
                if not domain.rubric:
                    futures.append(InfrastructureError(f"judge_{key}: domain {t.domain} has no rubric of its own"))
                    continue
                rubric = Rubric(t.domain, domain.rubric)
            try:
                futures.append(judge.submit(grade_item(t, s, c, rubric_name), rubric))
            except InfrastructureError as e:
                futures.append(e)
        deadline = time.monotonic() + worst_case_s(judge.spec) + SLACK_S
        out: list[float | InfrastructureError] = []
        for f in futures:
            if isinstance(f, InfrastructureError):
                out.append(f)
                continue
            result = f.result(timeout=max(deadline - time.monotonic(), 0.0))
            out.append(result.score if result.ok else InfrastructureError(f"judge_{key}: {result.error}"))
        return out


def grade_item(task: Task, sample: Trajectory, ctx: VerifierContext, rubric: str | None) -> JudgeItem:
    """What a grader sees of a sample: the transcript for a process rubric, else the domain's own
    item when it has one, else the final answer (against the task's reference answer)."""
    if rubric == "process":
        return process_item(task, sample, ctx.tokenizer)
    domain = get_domain(task.domain)
    if domain.grade_item is not None:
        return domain.grade_item(task, sample, ctx)
    return outcome_item(task, sample, ctx.tokenizer)


def within_groups(tasks: Sequence[Task], values: Sequence[float | InfrastructureError]
                  ) -> list[float | InfrastructureError]:
    """Each value z-scored among the values of the same task (its group); a group of one, or of
    equal values, gets 0. Failures stay failures and take no part."""
    groups: dict[str, list[int]] = defaultdict(list)
    for i, (task, v) in enumerate(zip(tasks, values)):
        if not isinstance(v, InfrastructureError):
            groups[task.id].append(i)
    out = list(values)
    for where in groups.values():
        xs = [float(values[i]) for i in where]  # type: ignore[arg-type]
        mean = statistics.fmean(xs)
        std = statistics.pstdev(xs) if len(xs) > 1 else 0.0
        for i, x in zip(where, xs):
            out[i] = (x - mean) / std if std > 1e-8 else 0.0
    return out


def check_scorers(cfg: RewardConfig, domains: Sequence[str]) -> None:
    """At start-up, before anything runs: a judge with the domain rubric needs domains that have
    one, and every configured reward model's folder must exist."""
    plan = resolve_scorers(cfg.scorers)
    used = {n for d in domains for n in plan.get(d, [])}
    for key, model in cfg.models.items():
        if f"rm_{key}" in used and not (Path(model.path) / "config.json").is_file():
            raise UserError(f"reward.models.{key}.path: {model.path!r} is not a model folder (no config.json); "
                            "train one with `tempering train-rm`")
    for domain in domains:
        for name in plan.get(domain, []):
            kind, _, key = name.partition("_")
            if kind == "judge" and cfg.judges[key].rubric.strip() == DOMAIN_RUBRIC and not get_domain(domain).rubric:
                raise UserError(f"reward.judges.{key}: rubric is {DOMAIN_RUBRIC!r} but domain {domain} "
                                f"(in reward.scorers) has no rubric of its own; give the criteria as text")
