"""Checking domains without a model: a task's oracle must score 1, doing nothing and junk 0.

A `Scorer` plays answers to tasks through the same episode machinery and reward service that
training uses, and scores them: the task's reference (its SFT reference, turn by turn: tools
really run) as the oracle, an empty answer as the no-op, and junk answers (`junk_answers`: "0",
random text, the question copied back, a long list of numbers) in `Scorer.check`; answers given
from outside (`tempering tasks score`) in `Scorer.score`. A domain whose oracle is not a
reference answer (terminal tasks: a solution script) gives its own `Domain.check`. It never
trains anything and needs no model. It sits beside `train.py`, above the packages whose parts
it drives (tasks, rollout, reward, agent, sandbox, pool); the commands are `tempering.tasks_cli`.
"""

from __future__ import annotations

import dataclasses
import random
import string
from dataclasses import dataclass, field
from typing import Iterable, Sequence

from tempering.agent.format import tool_format
from tempering.agent.tools import tool_schemas
from tempering.config import RewardConfig, SandboxConfig
from tempering.pool import with_id
from tempering.records import Reward, Task, Trajectory
from tempering.reward import RewardService, Submission
from tempering.rollout.environment import Environments
from tempering.rollout.episode import Episode, replay
from tempering.rollout.group_key import GroupKey
from tempering.sandbox import Sandbox, make_sandbox
from tempering.tasks import Domain, get_domain
from tempering.tokenizer import Tokenizer, char_tokenizer

_CONTEXT = 1 << 22  # no engine here: no context limit but the task's own budget


def junk_answers(task: Task, rng: random.Random) -> dict[str, str]:
    """Answers that must score 0 on any task: empty, "0", random text, the question copied back,
    a long list of numbers."""
    words = " ".join("".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(2, 8)))
                     for _ in range(12))
    return {"empty": "", "zero": "0", "random_text": words, "question": task.prompt[:4000],
            "numbers": " ".join(str(rng.randint(-10_000, 10_000)) for _ in range(200))}


@dataclass
class TaskCheck:
    domain: str
    task: str
    oracle: float | None  # the oracle's outcome; None: the task has no oracle
    answers: dict[str, float] = field(default_factory=dict)  # junk name -> outcome
    failures: list[str] = field(default_factory=list)  # what went wrong, as phrases

    @property
    def ok(self) -> bool:
        return not self.failures


def tokenizer_for(tasks: Sequence[Task], texts: Iterable[str] = ()) -> Tokenizer:
    """A character tokenizer that spells every prompt, reference and junk answer, and `texts`
    (no model needs these ids: they only carry text through the episode and the verifier)."""
    chars = set(string.printable) | {c for text in texts for c in text}
    for t in tasks:
        chars |= set(t.prompt) | set("".join(t.reference_turns)) | {c for m in t.messages for c in m.content}
    return char_tokenizer("".join(sorted(chars)))


def draw(domain: Domain, count: int, seed: int) -> list[Task]:
    """`count` tasks of `domain` with the pool's ids (a checked task is the task training sees):
    generated from `seed`, or a dataset's first held-out ones."""
    if domain.is_dataset:
        return [with_id(t) for t in domain.load("heldout")[:count]]
    rng = random.Random(seed)
    return [with_id(domain.generate(rng)) for _ in range(count)]


class Scorer:
    """The episode and reward machinery for a known set of tasks and answers: a character
    tokenizer that spells them all, the sandbox when a domain needs one, one reward service (its
    verifier process pool starts with the first heavy verifier, never for the others). Close it."""

    def __init__(self, tasks: Sequence[Task], answers: Iterable[str] = (), sandbox: SandboxConfig = SandboxConfig(),
                 reward: RewardConfig = RewardConfig(), workers: int = 2):
        self.tokenizer = tokenizer_for(tasks, answers)
        needs = any(get_domain(t.domain).sandbox for t in tasks)
        self.sandbox: Sandbox | None = make_sandbox(dataclasses.replace(sandbox, workers=workers)) if needs else None
        self.reward = RewardService(dataclasses.replace(reward, workers=workers), self.tokenizer, self.sandbox)
        self.envs = Environments(self.sandbox)

    def __enter__(self) -> Scorer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.reward.close()
        if self.sandbox is not None:
            self.sandbox.close()

    def score(self, task: Task, turns: Sequence[str]) -> tuple[Reward, Trajectory]:
        """The reward of an episode of `task` whose assistant turns are `turns` (tool calls in the
        compact format run for real). -> the reward and the episode's trajectory."""
        fmt = tool_format("compact", self.tokenizer)
        hosts = self.envs.open(task, 1, GroupKey("check")) or [None]
        try:
            tools = tool_schemas(task) if task.tools and self.tokenizer.chat_template else None
            prompt = self.tokenizer.encode_prompt(task.prompt, task.messages, tools)
            episode = Episode(task, 0, prompt, task.budget.max_tokens, _CONTEXT, fmt.parse, fmt.renderer, hosts[0])
            replay(episode, list(turns) or [""], self.tokenizer)
            trajectory = episode.trajectory(self.tokenizer.decode(episode.token_ids))
            state = hosts[0].final_state() if hosts[0] is not None else None
            (r,) = self.reward.score([Submission(task, trajectory, state)])
            return r, trajectory
        finally:
            if hosts[0] is not None:
                self.envs.close(hosts[0])

    def check(self, domain: Domain, task: Task, seed: int = 0) -> TaskCheck:
        """The oracle must score 1; the no-op and junk answers 0."""
        row = TaskCheck(domain.name, task.id, None)
        if domain.check is not None:
            row.oracle, row.answers["noop"] = domain.check(task, self.envs.sandbox)
        else:
            if task.reference is not None:
                r, _ = self.score(task, task.reference_turns)
                row.oracle = 0.0 if r.failed else r.outcome
                if r.failed or r.outcome != 1.0:
                    row.failures.append(f"oracle scored {r.outcome} ({r.reason})")
            for name, answer in junk_answers(task, random.Random(seed)).items():
                r, _ = self.score(task, [answer])
                row.answers[name] = r.outcome
                if r.failed or r.outcome != 0.0:
                    row.failures.append(f"{name} answer scored {r.outcome}"
                                        f"{' (failed: ' + r.reason + ')' if r.failed else ''}")
        if row.oracle is None:
            row.failures.append("no oracle: the task has no reference and its domain no check")
        elif domain.check is not None:
            if row.oracle != 1.0:
                row.failures.append(f"oracle scored {row.oracle}")
            if row.answers.get("noop") != 0.0:
                row.failures.append(f"no-op scored {row.answers.get('noop')}")
        return row
