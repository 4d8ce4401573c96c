"""`EpisodeRunner`: groups of episodes in flight on one engine, event-driven over `engine.step()`.

A group is the n samples of one task. Its first turn is one engine request with n samples (they
share the prompt's KV); every later turn of a sample is a request of its own, whose prompt is the
sample's whole context so far (the prefix cache serves what was computed before). The moment a
sample's turn ends, its tool calls go to a thread; the moment their results are back, its next
turn is queued; the moment the last sample of a group ends, the group is submitted to the reward
service, whose future posts it back scored; scored groups come out of `poll`. Nothing waits for
the slowest sample of a batch, and the engine keeps stepping while tools and verifiers run.
Opening a group's workspaces (sandbox sessions, a Harbor environment's set-up) runs in a thread.
Threads and futures report through one queue of `RunnerEvent`s.

Only the thread calling `poll` touches the engine. It knows nothing of batches, weights or
evaluation labels: a group carries its `GroupKey` back to the caller. In `lockstep`
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
from typing import Callable, Sequence, assert_never

from tempering.agent.format import tool_format
from tempering.agent.observation import ObservationRenderer
from tempering.agent.tools import execute, tool_schemas
from tempering.engine import LLM, SamplingParams
from tempering.records import Group, Reward, Task, ToolCall, Trajectory
from tempering.reward import RewardService, Submission
from tempering.rollout.environment import Environments
from tempering.rollout.group_key import GroupKey
from tempering.rollout.episode import Episode
from tempering.runtime import Stall
from tempering.sandbox import Sandbox
from tempering.scheduler.node import NodeSandbox
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


@dataclass(frozen=True)
class Opened:
    """A group's workspaces are open (None: its task has no tools)."""

    group: _Group
    hosts: list[ToolHost] | None


@dataclass(frozen=True)
class ToolsDone:
    """A sample's tool calls of its last turn came back."""

    group: _Group
    episode: Episode
    calls: list[ToolCall]


@dataclass(frozen=True)
class Scored:
    """The reward service settled a group's samples (`rewards` is done)."""

    group: _Group
    trajectories: list[Trajectory]
    rewards: cf.Future[list[Reward]]
    submitted: float  # perf_counter at the submit: the group's scoring time


@dataclass(frozen=True)
class Failed:
    """A thread's work raised: `poll` raises it again."""

    error: BaseException


RunnerEvent = Opened | ToolsDone | Scored | Failed


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
    def build(cls, engine: LLM, tokenizer: Tokenizer, reward: RewardService, sandbox: Sandbox | NodeSandbox | None = None,
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
        self._in_thread(lambda: self._open(group), "open")

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
        done: list[tuple[GroupKey, Group]] = []
        while True:
            try:
                event = self._events.get(timeout=wait) if wait else self._events.get_nowait()
            except queue.Empty:
                return done
            wait = 0.0
            result = self._dispatch(event)
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

    def _poll_lockstep(self, timeout: float) -> list[tuple[GroupKey, Group]]:
        """`poll`'s second half in lockstep: every opening and tool call in flight is waited for,
        then all events are handled in the order of their groups' start and their samples'."""
        events: list[RunnerEvent] = []
        deadline = time.monotonic() + self._settle_s
        while self._feeding > sum(not isinstance(e, Scored) for e in events):
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
        done = [self._dispatch(e) for e in sorted(events, key=_event_order)]
        return [d for d in done if d is not None]

    # -- in the polling thread ---------------------------------------------------------------------
    def _dispatch(self, event: RunnerEvent) -> tuple[GroupKey, Group] | None:
        self._pending_tasks -= 1
        match event:
            case Opened(group, hosts):
                self._feeding -= 1
                self._opened(group, hosts)
            case ToolsDone(group, episode, calls):
                self._feeding -= 1
                self._results(group, episode, calls)
            case Scored():
                return self._scored(event)
            case Failed(error):
                raise error
            case _:
                assert_never(event)
        return None

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
                self._in_thread(lambda ep=ep, calls=calls: self._call_tools(group, ep, calls), "tools")
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
        """Submit a group whose samples all ended; its rewards come back as a `Scored` event."""
        if group.scoring or not all(ep.done for ep in group.episodes):
            return
        group.scoring = True
        self._pending_tasks += 1
        trajectories = [ep.trajectory(self.tokenizer.decode(ep.token_ids)) for ep in group.episodes]
        states = [h.final_state() for h in group.hosts] or [None] * len(trajectories)
        submitted = time.perf_counter()
        rewards = self.reward.submit([Submission(group.task, t, w, group.key.tag(group.task, i))
                                      for i, (t, w) in enumerate(zip(trajectories, states))])
        rewards.add_done_callback(lambda f: self._events.put(Scored(group, trajectories, f, submitted)))

    def _scored(self, event: Scored) -> tuple[GroupKey, Group]:
        group = event.group
        self._add("score", time.perf_counter() - event.submitted)
        self._close_hosts(group)
        self._groups.remove(group)
        return group.key, Group(task=group.task, trajectories=event.trajectories, rewards=event.rewards.result())

    # -- in worker threads -------------------------------------------------------------------------
    def _in_thread(self, work: Callable[[], RunnerEvent], phase: str) -> None:
        """`work` in a thread; the event it returns (or its failure) goes to the queue."""
        self._pending_tasks += 1
        self._feeding += 1

        def run() -> None:
            start = time.perf_counter()
            try:
                self._events.put(work())
            except BaseException as e:  # noqa: BLE001 - re-raised in the polling thread
                self._events.put(Failed(e))
            finally:
                self._add(phase, time.perf_counter() - start)

        self._threads.submit(run)

    def _open(self, group: _Group) -> Opened:
        return Opened(group, self.open_hosts(group.task, len(group.episodes), group.key))

    def _call_tools(self, group: _Group, ep: Episode, calls: list[ToolCall]) -> ToolsDone:
        turn = ep.num_assistant_turns - 1
        done = [execute(c, ep.task, ep.host, turn) if ep.host is not None
                else dataclasses.replace(c, error="this task has no tools", error_kind="unknown_tool") for c in calls]
        return ToolsDone(group, ep, done)

    def _close_hosts(self, group: _Group) -> None:
        hosts, group.hosts = group.hosts, []
        for h in hosts:
            self.close_host(h)


_PHASES = ("generate", "open", "tools", "score")


def _event_order(event: RunnerEvent) -> tuple:
    """An event by its group's start and its sample (a failure first: it ends the run)."""
    if isinstance(event, Failed):
        return (-1, 0, "")
    ep = event.episode if isinstance(event, ToolsDone) else None
    return (event.group.seq, ep.index if ep is not None else -1, type(event).__name__)
