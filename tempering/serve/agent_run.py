"""`AgentRun`: one served episode, played server-side turn by turn, as training plays it.

The episode is the rollout's own `Episode` (the prompt rendered with the task's tool schemas,
turns parsed by the agent loop's parser, tool results appended as tokens rendered once): each
model turn is one request through the engine loop's fair queue under the run's tenant; each
tool call runs on the episode's workspace (`agent.tools.execute`: a sandbox session, with the
isolation, limits and telemetry of training), one at a time, in the caller's thread. Events go to
`emit` as they happen (`run.started`, `turn`, `tool_result`). `cancel` (from any thread: the
client went away) stops it where it is: the engine request is aborted and the workspace closed
(a sandbox command in progress is killed). It neither opens nor closes workspaces nor scores:
the caller (`serve.agents`) does, and it knows nothing of HTTP.
"""

from __future__ import annotations

import dataclasses
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from tempering.agent.tools import execute
from tempering.tasks.host import ToolHost
from tempering.engine.outputs import CompletionOutput
from tempering.engine.sampling_params import SamplingParams
from tempering.records import ExecResult, ToolCall
from tempering.rollout.episode import Episode
from tempering.serve.engine_loop import EngineLoop, Ticket
from tempering.serve.tenants import Tenant
from tempering.tokenizer import Tokenizer

_POLL_S = 0.1  # how often a wait for the engine looks at the cancel flag


class RunCancelled(Exception):
    """The run was cancelled (its client went away)."""


@dataclass
class RunStats:
    """What a run used, for its record: its engine requests' waits and tokens, and its clock."""

    start: float = field(default_factory=time.monotonic)
    first_token_at: float | None = None
    queue_s: float | None = None  # its first turn's wait for the engine
    prompt_tokens: int = 0
    version: int = -1  # the policy version of its first turn


class AgentRun:
    def __init__(self, loop: EngineLoop, tokenizer: Tokenizer, tenant: Tenant, episode: Episode, host: ToolHost | None,
                 params: SamplingParams, deadline_s: float, emit: Callable[[dict], None]):
        self.loop, self.tokenizer, self.tenant = loop, tokenizer, tenant
        self.episode, self.host, self.params = episode, host, params
        self.deadline_s, self.emit = deadline_s, emit
        self.stats = RunStats()
        self.texts: list[str] = []  # each assistant turn's text
        self.cancelled = threading.Event()
        self._ticket: Ticket | None = None
        self._lock = threading.Lock()

    def play(self) -> Episode:
        """Turns until the episode ends (or RunCancelled). -> the episode."""
        ep = self.episode
        while (room := ep.next_turn_tokens()) > 0:
            out = self._generate(dataclasses.replace(self.params, n=1, max_tokens=room))
            text = self.tokenizer.decode(out.token_ids)
            calls = ep.add_turn(list(out.token_ids), list(out.logprobs), list(out.versions), out.finish_reason, text)
            turn = ep.num_assistant_turns - 1
            self.texts.append(text)
            self.emit({"type": "turn", "turn": turn, "content": text, "finish_reason": out.finish_reason,
                       "tool_calls": [call_json(c) for c in calls]})
            if not calls:
                break
            done = []
            for position, call in enumerate(calls):
                self._check()
                result = execute(call, ep.task, self.host, turn) if self.host is not None else dataclasses.replace(
                    call, error="this task has no tools", error_kind="unknown_tool")
                self._check()  # a command killed by cancel is not the model's doing: not reported as its result
                done.append(result)
                self.emit({"type": "tool_result", "turn": turn, "position": position, **call_json(result)})
            ep.add_results(done)
        return ep

    def cancel(self) -> None:
        """Stop the run now: its engine request is aborted and its workspace closed."""
        with self._lock:
            if self.cancelled.is_set():
                return
            self.cancelled.set()
            ticket = self._ticket
        if ticket is not None:
            self.loop.cancel(ticket)
        close = getattr(self.host, "close", None)
        if close is not None:
            close()  # a sandbox session: a command in progress is killed, later ones refused

    def _check(self) -> None:
        if self.cancelled.is_set():
            raise RunCancelled()

    def _generate(self, params: SamplingParams) -> CompletionOutput:
        """One model turn through the engine loop. Raises RunCancelled, TimeoutError, or
        RuntimeError for an engine failure."""
        events: queue.Queue = queue.Queue()
        with self._lock:
            self._check()
            ticket = self._ticket = self.loop.submit(self.episode.context, params, events, 0, False, self.tenant)
        deadline = time.monotonic() + self.deadline_s
        while True:
            try:
                _, kind, payload = events.get(timeout=_POLL_S)
            except queue.Empty:
                self._check()
                if time.monotonic() > deadline:
                    self.loop.cancel(ticket)
                    raise TimeoutError(f"a turn took longer than serve.request_timeout_s = {self.deadline_s:g}") from None
                continue
            if kind == "error":
                raise RuntimeError(payload)
            self._account(ticket, payload.prompt_token_ids)
            return payload.outputs[0]

    def _account(self, ticket: Ticket, prompt: list[int]) -> None:
        s = self.stats
        if s.queue_s is None and ticket.admitted_at is not None:
            s.queue_s, s.version = ticket.admitted_at - ticket.queued_at, ticket.version
        if s.first_token_at is None:
            s.first_token_at = ticket.first_token_at
        s.prompt_tokens += len(prompt)


def call_json(c: ToolCall) -> dict:
    """A tool call as a run's events and result show it: its arguments, output or error, and the
    sandbox execution of a command."""
    out: dict = {"name": c.name, "arguments": dict(c.arguments)}
    if c.output or c.error or c.result is not None:
        out.update(output=c.output, error=c.error or None, error_kind=c.error_kind or None)
        out["exec"] = exec_json(c.result) if c.result is not None else None
    return out


def exec_json(r: ExecResult) -> dict:
    return {"reason": r.reason.value, "exit_code": r.exit_code, "wall_s": round(r.wall_s, 4),
            "cpu_s": round(r.cpu_s, 4), "peak_memory_mb": round(r.peak_memory_mb, 2), "start": r.start,
            "truncated": r.truncated}
