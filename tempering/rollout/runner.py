"""`EpisodeRunner`: groups of episodes in flight on one engine, event-driven over `engine.step()`.

A group is the n samples of one task. Its first turn is one engine request with n samples (they
share the prompt's KV); every later turn of a sample is a request of its own, whose prompt is the
sample's whole context so far (the prefix cache serves what was computed before). The moment a
sample's turn ends, its tool calls go to a thread; the moment their results are back, its next
turn is queued; the moment the last sample of a group ends, the group goes to the reward service
in a thread; scored groups come out of `poll`. Nothing waits for the slowest sample of a batch,
and the engine keeps stepping while tools and verifiers run. Opening a group's workspaces
(sandbox sessions, a Harbor environment's set-up) also runs in a thread.

Only the thread calling `poll` touches the engine. It knows nothing of batches, weights or
evaluation labels: a group carries an opaque `key` back to the caller. In `lockstep`
(run.deterministic) it gives up that overlap for a schedule that repeats: after each engine step
it waits for every workspace opening and tool call in flight, and queues the turns they lead to
in the order the groups started (and by sample), so the engine sees the same requests at the
same steps in every run; scoring still overlaps generation.
"""

from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from tempering.agent.format import tool_format
from tempering.agent.observation import ObservationRenderer
from tempering.agent.tools import execute, tool_schemas
from tempering.engine import LLM, SamplingParams
from tempering.records import Group, Task, ToolCall
from tempering.reward import RewardService, Submission
from tempering.rollout.environment import Environments
from tempering.rollout.group_key import GroupKey
from tempering.rollout.episode import Episode
from tempering.runtime import Stall
from tempering.tasks.host import ToolHost
from tempering.tokenizer import Tokenizer

# opens the n workspaces of a task's episodes (sessions or plain workspaces); None: no tools
OpenHosts = Callable[[Task, int, GroupKey], "list[ToolHost] | None"]


@dataclass
class _Group:
    key: GroupKey
    task: Task
    episodes: list[Episode]
    params: SamplingParams
    seq: int = 0  # the order it started in
    scoring: bool = False
    hosts: list[ToolHost] = field(default_factory=list)


class EpisodeRunner:
    def __init__(self, engine: LLM, tokenizer: Tokenizer, reward: RewardService, parse: Callable[[str], list[ToolCall]],
                 renderer: ObservationRenderer | None, open_hosts: OpenHosts, close_host: Callable[[ToolHost], None],
                 workers: int, lockstep: bool = False, settle_s: float = 300.0):
        self.engine, self.tokenizer, self.reward = engine, tokenizer, reward
        self.parse, self.renderer = parse, renderer
        self.open_hosts, self.close_host = open_hosts, close_host
        self._threads = cf.ThreadPoolExecutor(workers, thread_name_prefix="episode")
        self._events: queue.SimpleQueue = queue.SimpleQueue()  # (handler, args) posted by threads
        self._requests: dict[int, tuple[_Group, list[Episode]]] = {}  # engine request -> its episodes
        self._seen: set[tuple[int, int]] = set()  # (request, sample) whose turn was taken
        self._groups: list[_Group] = []
        self._pending_tasks = 0  # thread work in flight
        self.lockstep, self._settle_s = lockstep, settle_s
        self._feeding = 0  # openings and tool calls in flight: what the next engine step may wait for
        self._started = 0  # groups started so far (their `seq`)
        # Where the time goes, summed: engine steps (wall, in the polling thread) and the
        # threads' work (opening workspaces, tool calls, scoring), which overlaps them; since
        # the start, and since the last `take_seconds`.
        self.seconds = dict.fromkeys(_PHASES, 0.0)
        self._since = dict.fromkeys(_PHASES, 0.0)
        self._lock = threading.Lock()
        arch, cfg = engine.model.arch, engine.cfg
        # Positions past the model's trained context are garbage; a sliding window lifts that bound.
        self._context = cfg.max_seq_len if cfg.sliding_window else min(cfg.max_seq_len, arch.max_position_embeddings)

    @classmethod
    def build(cls, engine: LLM, tokenizer: Tokenizer, reward: RewardService, sandbox: Any = None,
              tool_parser: str = "auto", workers: int = 4, lockstep: bool = False,
              settle_s: float = 300.0) -> "EpisodeRunner":
        """A runner whose tool calls use `tool_parser` (`rollout.tool_parser`) and whose episodes
        act on workspaces opened by `Environments` (sessions of `sandbox` where commands run)."""
        fmt = tool_format(tool_parser, tokenizer)
        envs = Environments(sandbox)
        return cls(engine, tokenizer, reward, fmt.parse, fmt.renderer, envs.open, envs.close, workers, lockstep,
                   settle_s)

    def take_seconds(self) -> dict[str, float]:
        """The seconds of each phase since the previous call."""
        with self._lock:
            since, self._since = self._since, dict.fromkeys(_PHASES, 0.0)
        return since

    def _add(self, phase: str, seconds: float) -> None:
        with self._lock:
            self.seconds[phase] += seconds
            self._since[phase] += seconds

    @property
    def busy(self) -> bool:
        return bool(self._groups)

    def run(self, tasks: Sequence[Task], n: int, params: SamplingParams, max_tokens: int,
            timeout_s: float = 600.0) -> list[Group]:
        """`run_group` for many tasks at once: start a group of each, poll until all are scored.
        -> their groups, in the order of `tasks`."""
        for i, task in enumerate(tasks):
            self.start(task, n, params, max_tokens, GroupKey("run", index=i))
        done: dict[int, Group] = {}
        deadline = time.monotonic() + timeout_s
        while len(done) < len(tasks):
            if time.monotonic() > deadline:
                raise Stall(f"episode runner: {len(tasks) - len(done)} of {len(tasks)} groups unfinished "
                            f"after {timeout_s:g} s")
            for key, group in self.poll(0.05):
                done[key.index] = group
        return [done[i] for i in range(len(tasks))]

    def run_group(self, task: Task, n: int, params: SamplingParams, max_tokens: int) -> Group:
        """The n episodes of `task`, scored (while nothing else runs on this runner)."""
        return self.run([task], n, params, max_tokens)[0]

    def start(self, task: Task, n: int, params: SamplingParams, max_tokens: int, key: GroupKey) -> None:
        """Start a group of `n` episodes of `task`; it comes out of `poll` scored, with `key`.
        `max_tokens` caps the model tokens of each episode (with the task's own budget)."""
        tools = tool_schemas(task) if task.tools and self.tokenizer.chat_template else None
        prompt = self.tokenizer.encode_prompt(task.prompt, task.messages, tools)
        episodes = [Episode(task, i, prompt, max_tokens, self._context, self.parse, self.renderer) for i in range(n)]
        group = _Group(key, task, episodes, params, seq=self._started)
        self._started += 1
        self._groups.append(group)
        self._in_thread(self._open, group)

    def poll(self, timeout: float) -> list[tuple[GroupKey, Group]]:
        """Advance every group: one engine step (or, with nothing to generate, a wait of up to
        `timeout` for thread work), then whatever the threads finished. -> groups scored since."""
        if self.engine.has_unfinished():
            start = time.perf_counter()
            outputs = self.engine.step()
            self._add("generate", time.perf_counter() - start)
            for out in outputs:
                self._take_turns(out)
        if self.lockstep:
            return self._poll_lockstep(timeout)
        wait = timeout if self._pending_tasks and not self.engine.has_unfinished() else 0.0
        done: list[tuple[Any, Group]] = []
        while True:
            try:
                event = self._events.get(timeout=wait) if wait else self._events.get_nowait()
            except queue.Empty:
                return done
            wait = 0.0
            result = self._dispatch(*event)
            if result is not None:
                done.append(result)

    def close(self) -> None:
        """Abort what is in flight and close every workspace (sessions are reclaimed)."""
        for rid in list(self._requests):
            try:
                self.engine.abort(rid)
            except ValueError:
                pass  # it finished in the last step
        self._requests.clear()
        self._threads.shutdown(wait=True, cancel_futures=True)
        for g in self._groups:
            self._close_hosts(g)
        self._groups.clear()

    def _poll_lockstep(self, timeout: float) -> list[tuple[Any, Group]]:
        """`poll`'s second half in lockstep: every opening and tool call in flight is waited for,
        then all events are handled in the order of their groups' start and their samples'."""
        events: list[tuple] = []
        deadline = time.monotonic() + self._settle_s
        while self._feeding > sum(e[0] in (self._opened, self._results, _raise) for e in events):
            left = deadline - time.monotonic()
            if left <= 0:
                raise Stall(f"episode runner: {self._feeding} workspace openings or tool calls unfinished after "
                            f"{self._settle_s:g} s")
            try:
                events.append(self._events.get(timeout=min(left, 1.0)))
            except queue.Empty:
                pass
        # nothing to generate and nothing else came: wait a little for a score, as `poll` does
        wait = timeout if self._pending_tasks > len(events) and not events and not self.engine.has_unfinished() else 0
        while True:
            try:
                events.append(self._events.get(timeout=wait) if wait else self._events.get_nowait())
            except queue.Empty:
                break
            wait = 0
        done = [self._dispatch(*e) for e in sorted(events, key=_event_order)]
        return [d for d in done if d is not None]

    # -- in the polling thread ---------------------------------------------------------------------
    def _dispatch(self, handler: Callable, *args) -> Any:
        self._pending_tasks -= 1
        if handler.__name__ in ("_opened", "_results"):
            self._feeding -= 1
        return handler(*args)

    def _opened(self, group: _Group, hosts: list[ToolHost] | None) -> None:
        for ep, host in zip(group.episodes, hosts or ()):
            ep.host = host
        group.hosts = list(hosts or ())
        room = [ep.next_turn_tokens() for ep in group.episodes]  # the same for all: nothing happened yet
        self._submit(group, group.episodes, room[0])

    def _submit(self, group: _Group, episodes: list[Episode], max_tokens: int) -> None:
        """Queue the next turn of `episodes` (all at the same point of the same group)."""
        if max_tokens <= 0:
            self._maybe_score(group)
            return
        params = dataclasses.replace(group.params, n=len(episodes), max_tokens=max_tokens)
        rid = self.engine.add_request(episodes[0].context, params)
        self._requests[rid] = (group, episodes)

    def _take_turns(self, out) -> None:
        group, episodes = self._requests[out.request_id]
        for c in out.outputs:
            if not c.finish_reason or (out.request_id, c.index) in self._seen:
                continue
            self._seen.add((out.request_id, c.index))
            ep = episodes[c.index]
            calls = ep.add_turn(list(c.token_ids), list(c.logprobs), list(c.versions), c.finish_reason,
                                self.tokenizer.decode(c.token_ids))
            if calls:
                self._in_thread(self._call_tools, group, ep, calls)
            else:
                self._maybe_score(group)
        if out.finished:
            del self._requests[out.request_id]
            self._seen -= {(out.request_id, c.index) for c in out.outputs}

    def _results(self, group: _Group, ep: Episode, calls: list[ToolCall]) -> None:
        ep.add_results(calls)
        if ep.done:
            self._maybe_score(group)
        else:
            self._submit(group, [ep], ep.next_turn_tokens())

    def _maybe_score(self, group: _Group) -> None:
        if not group.scoring and all(ep.done for ep in group.episodes):
            group.scoring = True
            self._in_thread(self._score, group)

    def _scored(self, group: _Group, result: Group) -> tuple[GroupKey, Group]:
        self._groups.remove(group)
        return group.key, result

    # -- in worker threads -------------------------------------------------------------------------
    def _in_thread(self, fn: Callable, group: _Group, *args) -> None:
        self._pending_tasks += 1
        kind = _KINDS[fn.__name__]
        self._feeding += kind in ("open", "tools")

        def work() -> None:
            start = time.perf_counter()
            try:
                self._events.put(fn(group, *args))
            except BaseException as e:  # noqa: BLE001 - re-raised in the polling thread
                self._events.put((_raise, e))
            finally:
                self._add(kind, time.perf_counter() - start)

        self._threads.submit(work)

    def _open(self, group: _Group) -> tuple:
        return self._opened, group, self.open_hosts(group.task, len(group.episodes), group.key)

    def _call_tools(self, group: _Group, ep: Episode, calls: list[ToolCall]) -> tuple:
        turn = ep.num_assistant_turns - 1
        done = [execute(c, ep.task, ep.host, turn) if ep.host is not None
                else dataclasses.replace(c, error="this task has no tools", error_kind="unknown_tool") for c in calls]
        return self._results, group, ep, done

    def _score(self, group: _Group) -> tuple:
        trajectories = [ep.trajectory(self.tokenizer.decode(ep.token_ids)) for ep in group.episodes]
        try:
            states = [h.final_state() for h in group.hosts] or [None] * len(trajectories)
            rewards = self.reward.score([Submission(group.task, t, w, group.key.tag(group.task, i))
                                         for i, (t, w) in enumerate(zip(trajectories, states))])
        finally:
            self._close_hosts(group)
        return self._scored, group, Group(task=group.task, trajectories=trajectories, rewards=rewards)

    def _close_hosts(self, group: _Group) -> None:
        hosts, group.hosts = group.hosts, []
        for h in hosts:
            self.close_host(h)


_KINDS = {"_open": "open", "_call_tools": "tools", "_score": "score"}
_PHASES = ("generate", "open", "tools", "score")


def _raise(e: BaseException) -> None:
    raise e


def _event_order(event: tuple) -> tuple:
    """A thread's event by its group's start and its sample (a failure first: it ends the run)."""
    handler, *args = event
    if handler is _raise:
        return (-1, 0, 0)
    group, ep = args[0], args[1] if len(args) > 1 and isinstance(args[1], Episode) else None
    return (group.seq, ep.index if ep is not None else -1, handler.__name__)

