"""Checking domains without a model: a task's oracle must score 1, doing nothing and junk 0.

For each task drawn from a domain (seeded), `check_task` plays answers through the same
episode machinery and reward service that training uses: the task's reference (its SFT
reference, turn by turn: tools really run) as the oracle, an empty answer as the no-op, and junk
answers (`JUNK`: "0", random text, the question copied back, a long list of numbers). A domain
whose oracle is not a reference answer (terminal tasks: a solution script) gives its own
`Domain.check`. `score_turns` is the same scoring for one answer given from outside
(`tempering tasks score`). It never trains anything and needs no model.
"""

from __future__ import annotations

import dataclasses
import random
import string
from dataclasses import dataclass, field
from typing import Any, Sequence

from tempering.agent.format import tool_format
from tempering.agent.tools import tool_schemas
from tempering.config import RewardConfig
from tempering.records import Reward, Task
from tempering.reward import RewardService, Submission
from tempering.rollout.environment import Environments
from tempering.rollout.episode import Episode, replay
from tempering.rollout.group_key import GroupKey
from tempering.tasks.domain import Domain
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


def tokenizer_for(tasks: Sequence[Task]) -> Tokenizer:
    """A character tokenizer that spells every prompt, reference and junk answer (no model needs
    these ids: they only carry text through the episode and the verifier)."""
    chars = set(string.printable)
    for t in tasks:
        chars |= set(t.prompt) | set("".join(t.reference_turns)) | {c for m in t.messages for c in m.content}
    return char_tokenizer("".join(sorted(chars)))


def score_turns(task: Task, turns: Sequence[str], reward: RewardService, envs: Environments,
                tokenizer: Tokenizer) -> tuple[Reward, Any]:
    """The reward of an episode of `task` whose assistant turns are `turns` (tool calls in the
    compact format run for real). -> the reward and the episode's trajectory."""
    fmt = tool_format("compact", tokenizer)
    hosts = envs.open(task, 1, GroupKey("check")) or [None]
    try:
        tools = tool_schemas(task) if task.tools and tokenizer.chat_template else None
        episode = Episode(task, 0, tokenizer.encode_prompt(task.prompt, task.messages, tools), task.budget.max_tokens,
                          _CONTEXT, fmt.parse, fmt.renderer, hosts[0])
        replay(episode, list(turns) or [""], tokenizer)
        trajectory = episode.trajectory(tokenizer.decode(episode.token_ids))
        state = hosts[0].final_state() if hosts[0] is not None else None
        (r,) = reward.score([Submission(task, trajectory, state)])
        return r, trajectory
    finally:
        if hosts[0] is not None:
            envs.close(hosts[0])


def check_task(domain: Domain, task: Task, reward: RewardService, envs: Environments, tokenizer: Tokenizer,
               seed: int = 0) -> TaskCheck:
    row = TaskCheck(domain.name, task.id, None)
    if domain.check is not None:
        row.oracle, row.answers["noop"] = domain.check(task, envs.sandbox)
    else:
        if task.reference is not None:
            r, _ = score_turns(task, task.reference_turns, reward, envs, tokenizer)
            row.oracle = 0.0 if r.failed else r.outcome
            if r.failed or r.outcome != 1.0:
                row.failures.append(f"oracle scored {r.outcome} ({r.reason})")
        for name, answer in junk_answers(task, random.Random(seed)).items():
            r, _ = score_turns(task, [answer], reward, envs, tokenizer)
            row.answers[name] = r.outcome
            if r.failed or r.outcome != 0.0:
                row.failures.append(f"{name} answer scored {r.outcome}{' (failed: ' + r.reason + ')' if r.failed else ''}")
    if row.oracle is None:
        row.failures.append("no oracle: the task has no reference and its domain no check")
    elif domain.check is not None:
        if row.oracle != 1.0:
            row.failures.append(f"oracle scored {row.oracle}")
        if row.answers.get("noop") != 0.0:
            row.failures.append(f"no-op scored {row.answers.get('noop')}")
    return row


def draw(domain: Domain, count: int, seed: int) -> list[Task]:
    """`count` tasks of `domain` with ids: generated from `seed`, or a dataset's first held-out ones."""
    from tempering.pool import with_id  # the pool's ids, so a checked task is the task training sees

    if domain.is_dataset:
        return [with_id(t) for t in domain.load("heldout")[:count]]
    rng = random.Random(seed)
    return [with_id(domain.generate(rng)) for _ in range(count)]


def reward_service(tokenizer: Tokenizer, sandbox: Any, cfg: RewardConfig = RewardConfig()) -> RewardService:
    return RewardService(dataclasses.replace(cfg, workers=2), tokenizer, sandbox)
