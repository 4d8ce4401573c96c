"""`POST /v1/agent/runs`: a whole episode played server-side, against a task folder or a domain's
task, with the tools it was trained with; what a user evaluates a checkpoint with.

The body names the task: `{"terminal": NAME}` (a shipped terminal task), `{"folder": PATH}`
(a Harbor task folder under one of `serve.task_dirs`) or `{"domain": NAME, "seed": N}` (the task
that domain's generator makes from the seed, or a dataset's first held-out one), with optional
`max_turns` and `max_tokens` (at most the task's budget), `temperature`, `top_p`, `seed` and
`stream`. The episode's workspace opens as in training (a sandbox session under the run's tenant,
whose commands the node's scheduler orders by tenant share and priority), the run plays
(`AgentRun`), the task's verifier scores the final workspace, and the workspace is reclaimed:
at the end, on any failure, and as soon as the client goes away (a watcher sees its socket
close, while the run waits for the engine or a command runs). Streamed, the events come as
server-sent events (`run.started`, `turn`, `tool_result`, then `run.completed` with the whole
result); otherwise the result is one JSON object (`object: "agent.run"`). At most
`serve.max_agent_runs` run at once (503 past it). The sandbox and the reward service start
with the first run that needs them.
"""

from __future__ import annotations

import dataclasses
import select
import socket
import threading
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

from tempering.agent.format import tool_format
from tempering.agent.tools import tool_schemas
from tempering.tasks.host import ToolHost
from tempering.config import RewardConfig, SandboxConfig
from tempering.engine.sampling_params import SamplingParams
from tempering.errors import UserError
from tempering.jsonvalue import JSON
from tempering.records import Reward, Task
from tempering.reward import RewardService, Submission
from tempering.rollout.environment import Environments
from tempering.rollout.group_key import GroupKey
from tempering.rollout.episode import Episode
from tempering.serve import api
from tempering.serve.agent_run import AgentRun, RunCancelled, call_json
from tempering.serve.engine_loop import QueueFull
from tempering.serve.traffic import CLIENT_CLOSED, ServedRecord
from tempering.tasks import get_domain

if TYPE_CHECKING:
    from tempering.scheduler.node import NodeSandbox
    from tempering.serve.server import Call, Handler, Server

_KNOWN = {"model", "task", "max_turns", "max_tokens", "temperature", "top_p", "seed", "stream", "user"}


class AgentService:
    def __init__(self, server: "Server", sandbox: SandboxConfig, reward: RewardConfig):
        self.server, self.sandbox_cfg, self.reward_cfg = server, sandbox, reward
        self._slots = threading.BoundedSemaphore(server.cfg.max_agent_runs)
        self._lock = threading.Lock()
        self._node: NodeSandbox | None = None  # once a run needs it
        self._rewards: dict[bool, RewardService] = {}  # with / without the sandbox
        self._envs: dict[bool, Environments] = {}

    def serve(self, handler: "Handler", body: JSON, call: "Call") -> None:
        """Answer one POST /v1/agent/runs (its tenant is admitted; ApiError before any answer)."""
        if not isinstance(body, dict) or set(body) - _KNOWN:
            unknown = sorted(set(body) - _KNOWN) if isinstance(body, dict) else []
            raise api.ApiError(400, f"unsupported fields {unknown}" if unknown else "the body must be a JSON object")
        task = resolve_task(body.get("task"), self.server.cfg.task_dirs)
        task, params = _limits(task, body)
        if not self._slots.acquire(blocking=False):
            raise api.ApiError(503, f"{self.server.cfg.max_agent_runs} agent runs are running (serve.max_agent_runs)",
                               "server_error", retry_after=1.0)
        try:
            self._serve(handler, body, call, task, params)
        finally:
            self._slots.release()

    def _serve(self, handler: "Handler", body: dict, call: "Call", task: Task, params: SamplingParams) -> None:
        stream = bool(body.get("stream", False))
        run_id = f"run-{uuid.uuid4().hex[:24]}"
        needs = _needs_sandbox(task)
        try:
            envs, reward = self._resources(needs)
            hosts = envs.open(task, 1, GroupKey("serve"), call.tenant.name)
        except UserError as e:
            raise api.ApiError(503 if needs and self._node is None else 400, f"the task cannot run: {e}",
                               "server_error") from None
        host = hosts[0] if hosts else None
        sink = _Sink(handler, stream)
        run = sink.run = self._run(task, params, host, call, sink)
        watcher = _watch(handler.connection, run)
        head = {"id": run_id, "object": "agent.run", "created": int(time.time()), "model": self.server.model_name,
                "task": {"id": task.id, "domain": task.domain}}
        try:
            sink.start(run.loop.version)
            sink.emit({"type": "run.started", **head, "tenant": call.tenant.name})
            result, record = self._play(run, reward, host, head, call)
        finally:
            watcher.set()
            if host is not None:
                envs.close(host)
        # on record before the client has its answer (a client that reads the record next finds it)
        self.server.served(dataclasses.replace(record, status=CLIENT_CLOSED if run.cancelled.is_set() else 200))
        sink.finish(result, record.version)

    def _run(self, task: Task, params: SamplingParams, host: ToolHost | None, call: "Call", sink: "_Sink") -> AgentRun:
        engine, tok = self.server.engine, self.server.engine.tokenizer
        fmt = tool_format(self.server.tool_format, tok)
        tools = tool_schemas(task) if task.tools and tok.chat_template else None
        arch = engine.model.arch
        context = engine.cfg.max_seq_len if engine.cfg.sliding_window else min(engine.cfg.max_seq_len,
                                                                              arch.max_position_embeddings)
        episode = Episode(task, 0, tok.encode_prompt(task.prompt, task.messages, tools), task.budget.max_tokens,
                          context, fmt.parse, fmt.renderer, host)
        return AgentRun(self.server.loop, tok, call.tenant, episode, host, params, self.server.cfg.request_timeout_s,
                        sink.emit)

    def _play(self, run: AgentRun, reward: RewardService, host: ToolHost | None, head: dict,
              call: "Call") -> tuple[dict, ServedRecord]:
        error, score = "", None
        try:
            run.play()
        except RunCancelled:
            run.episode.abort()
        except (TimeoutError, RuntimeError, QueueFull) as e:
            run.episode.abort()
            error = f"{type(e).__name__}: {e}"
        ep = run.episode
        text = self.server.engine.tokenizer.decode(ep.token_ids)
        if not error and not run.cancelled.is_set():
            state = host.final_state() if host is not None else None  # what the verifier judges
            (score,) = reward.score([Submission(ep.task, ep.trajectory(text), state,
                                                GroupKey("serve").tag(ep.task, 0, call.tenant.name))])
        record = _record(run, call, text, score, error)
        if record.version < 0:  # no turn ran: the version it would have run with
            record = dataclasses.replace(record, version=self.server.loop.version)
        return _result(run, head, score, error, record.version), record

    def _resources(self, sandbox: bool) -> tuple[Environments, RewardService]:
        with self._lock:
            if sandbox and self._node is None:
                self._node = self._start_sandbox()
            if sandbox not in self._rewards:
                node = self._node if sandbox else None
                self._rewards[sandbox] = RewardService(self.reward_cfg, self.server.engine.tokenizer, node)
                self._envs[sandbox] = Environments(node)
            return self._envs[sandbox], self._rewards[sandbox]

    def _start_sandbox(self) -> NodeSandbox:
        from tempering.sandbox import make_sandbox
        from tempering.scheduler.node import NodeSandbox

        sb, cfg = self.sandbox_cfg, self.server.cfg
        node = NodeSandbox(make_sandbox(sb, cfg.log_dir or None), sb.workers, sb.workers * sb.memory_mb, sb.memory_mb,
                           cfg.aging_s, cfg.request_timeout_s)
        tenants = self.server.tenants.all()
        total = sum(t.share for t in tenants)
        node.set_policy({t.name: t.share / total for t in tenants}, {t.name: t.priority for t in tenants})
        return node

    def close(self) -> None:
        for r in self._rewards.values():
            r.close()
        if self._node is not None:
            self._node.close()


def resolve_task(spec: JSON, task_dirs: tuple[str, ...]) -> Task:
    """The task a run's `task` field names (ApiError 400 or 404 otherwise)."""
    from tempering.tasks.terminal import catalog
    from tempering.tasks.terminal.domain import folder_task

    if not isinstance(spec, dict) or len(set(spec) & {"terminal", "folder", "domain"}) != 1:
        raise api.ApiError(400, 'task must be one of {"terminal": NAME}, {"folder": PATH} or {"domain": NAME, "seed": N}')
    if "terminal" in spec:
        try:
            info = catalog.get(str(spec["terminal"]))
        except KeyError as e:
            raise api.ApiError(404, str(e.args[0]), "not_found_error") from None
        return _with_id(folder_task(catalog.folder(info.name), info.agent_timeout_sec))
    if "folder" in spec:
        return _with_id(_folder(spec["folder"], task_dirs))
    from tempering.oracle import draw

    seed = spec.get("seed", 0)
    if type(seed) is not int:
        raise api.ApiError(400, f"task.seed must be an integer, got {seed!r}")
    try:
        domain = get_domain(str(spec["domain"]))
    except (KeyError, UserError) as e:
        raise api.ApiError(404, str(e), "not_found_error") from None
    return draw(domain, 1, seed)[0]


def _folder(path: JSON, task_dirs: tuple[str, ...]) -> Task:
    from tempering.tasks.harbor import Unrunnable, load_cached
    from tempering.tasks.terminal.domain import folder_task

    folder = Path(str(path)).resolve()
    if not any(folder.is_relative_to(Path(d).resolve()) for d in task_dirs):
        raise api.ApiError(403, f"task.folder {path!r} is not under serve.task_dirs "
                                f"({', '.join(task_dirs) or 'none are set'})", "permission_error")
    try:
        return folder_task(folder, load_cached(folder).config.agent_timeout_s)
    except (Unrunnable, OSError) as e:
        raise api.ApiError(400, f"task.folder: {e}") from None


def _with_id(task: Task) -> Task:
    from tempering.pool import with_id  # the pool's ids: a served run's task is the task training saw

    return with_id(task)


def _limits(task: Task, body: dict) -> tuple[Task, SamplingParams]:
    """The task with the request's tighter budget, and the run's sampling params."""
    b = task.budget
    turns, tokens = api._int(body, "max_turns", b.max_turns), api._int(body, "max_tokens", b.max_tokens)
    if not (1 <= turns <= b.max_turns) or not (1 <= tokens <= b.max_tokens):
        raise api.ApiError(400, f"max_turns must be in [1, {b.max_turns}] and max_tokens in [1, {b.max_tokens}] "
                                f"(the task's budget), got {turns} and {tokens}")
    try:
        params = SamplingParams(temperature=api._num(body, "temperature", 1.0), top_p=api._num(body, "top_p", 1.0),
                                seed=api._int(body, "seed", None))
    except ValueError as e:
        raise api.ApiError(400, str(e)) from None
    return dataclasses.replace(task, budget=dataclasses.replace(b, max_turns=turns, max_tokens=tokens)), params


def _needs_sandbox(task: Task) -> bool:
    env = task.environment
    return get_domain(task.domain).sandbox or "run" in task.tools or bool(env is not None and env.folder)


def _result(run: AgentRun, head: dict, score: Reward | None, error: str, version: int) -> dict:
    ep = run.episode
    status = "cancelled" if run.cancelled.is_set() else "failed" if error else "completed"
    turns = [t for t in ep.turns if t.role == "assistant"]
    return {**head, "system_fingerprint": api.fingerprint(version), "status": status,
            "finish_reason": ep.finish_reason, "error": error or None, "final": run.texts[-1] if run.texts else "",
            "turns": [{"content": text, "tool_calls": [call_json(c) for c in t.tool_calls]}
                      for text, t in zip(run.texts, turns)],
            "reward": None if score is None else {"total": score.total, "components": dict(score.components),
                                                  "failed": score.failed, "reason": score.reason},
            "usage": {"prompt_tokens": run.stats.prompt_tokens, "completion_tokens": sum(ep.loss_mask),
                      "turns": len(turns)},
            "latency_s": round(time.monotonic() - run.stats.start, 4)}


def _record(run: AgentRun, call: "Call", text: str, score: Reward | None, error: str) -> ServedRecord:
    s, ep = run.stats, run.episode
    return ServedRecord(
        time=call.arrived, tenant=call.tenant.name, kind="agent_run", model=call.server.model_name,
        version=s.version, status=200, latency_s=time.monotonic() - call.start,
        ttft_s=s.first_token_at - call.start if s.first_token_at is not None else None, queue_s=s.queue_s,
        prompt_tokens=s.prompt_tokens, completion_tokens=sum(ep.loss_mask),
        prompt=run.tokenizer.decode(ep.prompt_ids, skip_special_tokens=False), completion=text,
        finish_reason=ep.finish_reason, error=error,
        tool_calls=tuple((i, c) for i, t in enumerate(x for x in ep.turns if x.role == "assistant") for c in t.tool_calls),
        task=ep.task.id, reward=score.total if score is not None else None,
        reward_reason=score.reason if score is not None else "")


class _Sink:
    """Where a run's events go: server-sent events while streaming (a write that fails means the
    client went away: the run is cancelled), nothing otherwise; and its result at the end."""

    def __init__(self, handler: "Handler", stream: bool):
        self.handler, self.stream = handler, stream
        self.run: AgentRun | None = None
        self.gone = False

    def start(self, version: int) -> None:
        if self.stream:
            self.handler.version = version
            self.handler.start_events()

    def emit(self, event: dict) -> None:
        if not self.stream or self.gone:
            return
        try:
            self.handler._sse(event)
        except (BrokenPipeError, ConnectionResetError):
            self.gone = True
            if self.run is not None:
                self.run.cancel()

    def finish(self, result: dict, version: int) -> None:
        if self.stream:
            self.emit({"type": "run.completed", **result})
            if not self.gone:
                try:
                    self.handler.wfile.write(b"data: [DONE]\n\n")
                except (BrokenPipeError, ConnectionResetError):
                    pass
        elif result["status"] != "cancelled":
            self.handler.version = version
            self.handler._json(200, result)


def _watch(conn: socket.socket, run: AgentRun) -> threading.Event:
    """Cancel `run` when its client closes the connection; set the returned event to stop watching."""
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(0.1):
            try:
                readable, _, _ = select.select([conn], [], [], 0)
                if readable and conn.recv(1, socket.MSG_PEEK) == b"":
                    break
            except (OSError, ValueError):  # closed under us
                break
        else:
            return
        run.cancel()

    threading.Thread(target=loop, name="agent-run-watch", daemon=True).start()
    return stop
