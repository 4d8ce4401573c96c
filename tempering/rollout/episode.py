"""`Episode`: one sample of a task, turn by turn, as the trainer will read it.

It owns the sample's token arrays (model tokens with loss_mask 1, their logprob and policy
version; tool-result tokens with loss_mask 0, logprob 0, version -1), its turns and the calls
they made, and the task's budget: assistant turns, model tokens, wall time and the context
(the next turn must fit `max_seq_len`). It decides what a model turn means (a final answer,
tool calls to carry out, or the end of a budget) and appends tool results as tokens rendered
once (`ObservationRenderer`). It drives nothing: the runner feeds it the engine's turns and the
tools' results, from whichever thread carried them out.
"""

from __future__ import annotations

import time
from typing import Callable, Sequence

from tempering.agent.observation import ObservationRenderer
from tempering.agent.tools import ends_episode, execute
from tempering.records import Task, ToolCall, Trajectory, Turn
from tempering.tasks.host import ToolHost
from tempering.tokenizer import Tokenizer


class Episode:
    def __init__(self, task: Task, index: int, prompt_ids: list[int], max_tokens: int, max_seq_len: int,
                 parse: Callable[[str], list[ToolCall]], renderer: ObservationRenderer | None,
                 host: ToolHost | None = None):
        self.task, self.index, self.prompt_ids = task, index, prompt_ids
        self.max_tokens = min(max_tokens, task.budget.max_tokens)  # model tokens over all turns
        self.max_seq_len = max_seq_len
        self.parse, self.renderer, self.host = parse, renderer, host
        self.token_ids: list[int] = []
        self.logprobs: list[float] = []
        self.loss_mask: list[int] = []
        self.versions: list[int] = []
        self.turns: list[Turn] = []
        self.finish_reason = ""
        self.started = time.monotonic()

    @property
    def done(self) -> bool:
        return bool(self.finish_reason)

    @property
    def context(self) -> list[int]:
        return self.prompt_ids + self.token_ids

    @property
    def num_assistant_turns(self) -> int:
        return sum(t.role == "assistant" for t in self.turns)

    def next_turn_tokens(self) -> int:
        """How many tokens the next assistant turn may generate; 0 ends the episode (its
        finish reason then says which budget ran out)."""
        if self.done:
            return 0
        left = self.max_tokens - sum(self.loss_mask)
        room = self.max_seq_len - len(self.prompt_ids) - len(self.token_ids)
        if time.monotonic() - self.started > self.task.budget.wall_s:
            self.finish_reason = "timeout"
        elif left <= 0:
            self.finish_reason = "length"
        elif room <= 0:
            self.finish_reason = "context"
        return 0 if self.done else min(left, room)

    def add_turn(self, token_ids: list[int], logprobs: list[float], versions: list[int], finish_reason: str,
                 text: str) -> list[ToolCall]:
        """Append an assistant turn as the engine produced it. -> the tool calls to carry out
        (empty when the episode is over: a final answer, or a budget ran out)."""
        start = len(self.token_ids)
        self._append(token_ids, logprobs, versions, 1)
        calls = self.parse(text) if self.task.tools and finish_reason == "stop" else []
        self.turns.append(Turn("assistant", start, len(self.token_ids)))
        if finish_reason != "stop":
            self.finish_reason = finish_reason  # "length" (the turn hit its token limit) or "abort"
        elif not calls:
            self.finish_reason = "stop"  # a final answer
        return calls

    def add_results(self, calls: list[ToolCall]) -> None:
        """Record the carried-out calls of the last assistant turn and append their results as
        tool-turn tokens, unless the episode ends here (a submit, the last allowed turn, or
        results that would not leave the next turn room in the context)."""
        last = self.turns[-1]
        self.turns[-1] = Turn(last.role, last.start, last.end, tuple(calls))
        if any(ends_episode(c, self.task) for c in calls):
            self.finish_reason = "stop"
            return
        if self.num_assistant_turns >= self.task.budget.max_turns:
            self.finish_reason = "max_turns"
            return
        ids = self.renderer.tokens(calls)
        if len(self.prompt_ids) + len(self.token_ids) + len(ids) >= self.max_seq_len:
            self.finish_reason = "context"
            return
        start = len(self.token_ids)
        self._append(ids, [0.0] * len(ids), [-1] * len(ids), 0)
        self.turns.append(Turn("tool", start, len(self.token_ids)))

    def abort(self) -> None:
        if not self.done:
            self.finish_reason = "abort"

    def _append(self, ids: list[int], logprobs: list[float], versions: list[int], mask: int) -> None:
        self.token_ids += ids
        self.logprobs += logprobs
        self.versions += versions
        self.loss_mask += [mask] * len(ids)

    def trajectory(self, text: str) -> Trajectory:
        single = len(self.turns) == 1 and not self.turns[0].tool_calls
        return Trajectory(
            task_id=self.task.id, domain=self.task.domain, sample_index=self.index, prompt_ids=self.prompt_ids,
            token_ids=self.token_ids, logprobs=self.logprobs, loss_mask=self.loss_mask, versions=self.versions,
            text=text, finish_reason=self.finish_reason, turns=[] if single else list(self.turns),
            created_at=time.time())


def replay(episode: Episode, turns: Sequence[str], tokenizer: Tokenizer) -> Episode:
    """Play `turns` (the text of each assistant turn) as the policy: each is encoded and ended
    with eos, its tool calls are carried out on the episode's host, and their results appended,
    exactly as in a rollout. For SFT on multi-turn references and for scripted tests; a turn
    after the episode ended is an error."""
    for i, text in enumerate(turns):
        if episode.done:
            raise ValueError(f"replay: turn {i} ({text!r}) comes after the episode ended ({episode.finish_reason})")
        ids = tokenizer.encode(text) + [tokenizer.eos_id]
        calls = episode.add_turn(ids, [0.0] * len(ids), [-1] * len(ids), "stop", text)
        if calls:
            episode.add_results([execute(c, episode.task, episode.host, episode.num_assistant_turns - 1)
                                 for c in calls])
    return episode
