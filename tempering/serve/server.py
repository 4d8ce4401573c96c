"""`Server`: the HTTP front of `tempering serve`, an OpenAI-compatible API on the engine.

Routes: GET /health and GET /metrics (Prometheus; both open), GET /v1/models and GET /kv_usage,
POST /v1/completions and /v1/chat/completions (`stream` as server-sent events, `n` > 1, several
prompts, function calling), POST /v1/agent/runs (`serve.agents`). Every request but the open
ones is checked in this order: its API key names a tenant (401), the tenant is within its rate
(429 with Retry-After), `model` names the served model (404), the body is valid (400), the
engine's queue has room (503). Handler threads (stdlib `ThreadingHTTPServer`) hand requests to
the `EngineLoop` and wait with a deadline (`serve.request_timeout_s`, then 504). Every response
carries the policy version it was served with (header `X-Tempering-Version`, and
`system_fingerprint` in the body). Each answered request is counted (`ServeMetrics`) and, with
`serve.log_dir`, recorded (`TrafficLog`). No TLS: put it behind a proxy for anything public.
"""

from __future__ import annotations

import json
import math
import queue
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from tempering.config import RewardConfig, SandboxConfig, ServeConfig
from tempering.engine.llm_engine import LLM
from tempering.engine.outputs import RequestOutput
from tempering.jsonvalue import JSON
from tempering.records import ToolCall
from tempering.serve import api
from tempering.serve.engine_loop import EngineLoop, QueueFull, Ticket
from tempering.serve.metrics import CONTENT_TYPE, ServeMetrics
from tempering.serve.tenants import RateLimiter, Tenant, Tenants
from tempering.serve.traffic import CLIENT_CLOSED, ServedRecord, TrafficLog
from tempering.weights.sync import WeightSource

MAX_BODY = 1 << 20
VERSION_HEADER = "X-Tempering-Version"
ROUTES = {"/v1/completions": "completion", "/v1/chat/completions": "chat", "/v1/agent/runs": "agent_run"}


class Server(ThreadingHTTPServer):
    daemon_threads = True
    # The listen backlog: socketserver's 5 let a burst of clients connecting at once overflow it,
    # and the kernel then reset connections the clients already wrote their requests to (52 of
    # 1,000 requests from 64 clients lost in bench/serve.py). uvicorn's default is 2048.
    request_queue_size = 2048

    def __init__(self, engine: LLM, host: str = "127.0.0.1", port: int = 8000, model_name: str = "tempering",
                 cfg: ServeConfig = ServeConfig(), tenants: Tenants | None = None, source: WeightSource | None = None,
                 sandbox: SandboxConfig = SandboxConfig(), reward: RewardConfig = RewardConfig()):
        from tempering.serve.agents import AgentService  # it imports the rollout and task packages

        if engine.tokenizer is None:
            raise ValueError("serve: the engine needs a tokenizer")
        super().__init__((host, port), Handler)
        self.engine, self.model_name, self.cfg = engine, model_name, cfg
        self.tenants = tenants or Tenants.load(cfg)
        self.limiter = RateLimiter()
        self.loop = EngineLoop(engine, cfg.queue, cfg.max_running, cfg.max_queued, source)
        self.metrics = ServeMetrics()
        self.traffic = TrafficLog(cfg.log_dir) if cfg.log_dir else None
        tok = engine.tokenizer
        self.tool_format = cfg.tool_parser if cfg.tool_parser != "auto" else (
            "hermes" if tok.chat_template else "compact")
        self.agents = AgentService(self, sandbox, reward)
        self._thread: threading.Thread | None = None

    def start(self) -> "Server":
        """Run the engine loop and the HTTP server in background threads (tests, embedding)."""
        self.loop.start()
        self._thread = threading.Thread(target=self.serve_forever, name="http", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        self.shutdown()
        self.server_close()
        self.release()

    def release(self) -> None:
        """Stop the engine loop, the agent runs' sandbox and the traffic log (after serving)."""
        self.agents.close()
        self.loop.stop()
        if self.traffic is not None:
            self.traffic.close()

    def served(self, record: ServedRecord) -> None:
        self.metrics.observe(record)
        if self.traffic is not None and record.status not in (401, 404):
            self.traffic.record(record)


class Handler(BaseHTTPRequestHandler):
    server: Server
    protocol_version = "HTTP/1.1"
    version: int | None = None  # the policy version this response reports (None: the engine's now)

    def log_message(self, fmt: str, *args: object) -> None:  # keep test and server output quiet
        pass

    def end_headers(self) -> None:
        version = self.version if self.version is not None else self.server.loop.version
        self.send_header(VERSION_HEADER, str(version))
        super().end_headers()

    def do_GET(self) -> None:
        self.version = None
        if self.path == "/health":
            return self._json(200, {"status": "ok"})
        if self.path == "/metrics":
            loop = self.server.loop
            body = self.server.metrics.render(loop.queue.depths(), loop.running(), loop.version)
            return self._send(200, body, CONTENT_TYPE)
        if self.server.tenants.authenticate(self.headers.get("Authorization")) is None:
            return self._error(_unauthorized())
        if self.path == "/kv_usage":
            try:
                usage = self.server.loop.kv_usage(self.server.cfg.request_timeout_s)
            except queue.Empty:
                return self._error(api.ApiError(504, "the engine loop did not answer within serve.request_timeout_s",
                                                "timeout_error"))
            return self._json(200, usage.as_dict())
        if self.path == "/v1/models":
            return self._json(200, {"object": "list", "data": [
                {"id": self.server.model_name, "object": "model", "owned_by": "tempering",
                 "created": 0, "version": self.server.loop.version}]})
        self._error(api.ApiError(404, f"no route GET {self.path}", "not_found_error"))

    def do_POST(self) -> None:
        self.version = None
        call = Call(self.server, ROUTES.get(self.path, "completion"))
        try:
            if self.path not in ROUTES:
                raise api.ApiError(404, f"no route POST {self.path}", "not_found_error")
            body = self._body()
            self._admit(call)
            _check_model(body, self.server.model_name)
            if call.kind == "agent_run":
                return self.server.agents.serve(self, body, call)
            engine = self.server.engine
            req = api.parse(body, call.kind == "chat", engine.tokenizer, self.server.cfg.max_request_sequences,
                            self.server.tool_format)
            ids = [engine.check(p, req.params) for p in req.prompts]
        except api.ApiError as e:
            return self._fail(call, e)
        except ValueError as e:
            return self._fail(call, api.ApiError(400, str(e)))
        (self._stream if req.stream else self._complete)(call, req, ids)

    def _admit(self, call: "Call") -> None:
        """Name the call's tenant (401 without one), and take its rate token (429 when none is left)."""
        tenant = call.tenant = self.server.tenants.authenticate(self.headers.get("Authorization"))
        if tenant is None:
            raise _unauthorized()
        wait = self.server.limiter.admit(tenant)
        if wait > 0:
            raise api.ApiError(429, f"tenant {tenant.name} is over its rate of {tenant.requests_per_s:g} requests per "
                                    f"second (burst {tenant.burst}); retry in {wait:.1f} s", "rate_limit_error",
                               "rate_limit_exceeded", retry_after=wait)

    def _body(self) -> JSON:
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            self.close_connection = True  # whatever body follows cannot be told from the next request
            raise api.ApiError(411, "a Content-Length header is required") from None
        if length > MAX_BODY:
            self.close_connection = True
            raise api.ApiError(413, f"request body over {MAX_BODY} bytes")
        try:
            return json.loads(self.rfile.read(length) or b"null")
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise api.ApiError(400, f"the body is not valid JSON: {e}") from None

    def _fail(self, call: "Call", e: api.ApiError) -> None:
        self.server.served(call.record(e.status, error=e.message))
        self._error(e)

    def _submit(self, call: "Call", req: api.ApiRequest, ids: list[list[int]]) -> queue.Queue:
        events: queue.Queue = queue.Queue()
        try:
            for tag, i in enumerate(ids):
                call.tickets.append(self.server.loop.submit(i, req.params, events, tag, req.stream, call.tenant))
        except QueueFull as e:
            self._cancel(call)
            raise api.ApiError(503, f"the server is busy: {e}", "server_error", retry_after=1.0) from None
        return events

    def _cancel(self, call: "Call") -> None:
        for t in call.tickets:
            self.server.loop.cancel(t)

    def _events(self, events: queue.Queue, tickets: list[Ticket]):
        """Yield (tag, kind, payload) until every ticket is done; TimeoutError past the deadline."""
        deadline = time.monotonic() + self.server.cfg.request_timeout_s
        open_tags = {t.tag for t in tickets}
        while open_tags:
            try:
                tag, kind, payload = events.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise TimeoutError(f"no result within serve.request_timeout_s = "
                                   f"{self.server.cfg.request_timeout_s}") from None
            if kind in ("done", "error"):
                open_tags.discard(tag)
            yield tag, kind, payload

    def _complete(self, call: "Call", req: api.ApiRequest, ids: list[list[int]]) -> None:
        try:
            events = self._submit(call, req, ids)
        except api.ApiError as e:
            return self._fail(call, e)
        try:
            for tag, kind, payload in self._events(events, call.tickets):
                if kind == "error":
                    self._cancel(call)
                    return self._fail(call, api.ApiError(500, payload, "server_error"))
                if kind == "done":
                    call.done[tag] = payload
        except TimeoutError as e:
            self._cancel(call)
            return self._fail(call, api.ApiError(504, str(e), "timeout_error"))
        n, tok = req.params.n, self.server.engine.tokenizer
        choices = [api.choice(req, tag * n + c.index, c, tok) for tag in sorted(call.done) for c in call.done[tag].outputs]
        self.version = call.version
        calls = [ToolCall(c["function"]["name"], json.loads(c["function"]["arguments"]), id=c["id"])
                 for ch in choices for c in (ch.get("message") or {}).get("tool_calls", [])]
        self.server.served(call.record(200, ids=ids, calls=calls))  # on record before the client has it
        self._json(200, api.response(req, self.server.model_name, choices, sum(map(len, ids)), call.generated,
                                     call.version))

    def _stream(self, call: "Call", req: api.ApiRequest, ids: list[list[int]]) -> None:
        try:
            events = self._submit(call, req, ids)
        except api.ApiError as e:
            return self._fail(call, e)
        self.start_events()
        texts = _StreamTexts(self.server.engine.tokenizer, req.params.stop)
        n, model, scanners = req.params.n, self.server.model_name, {}
        status, error = 200, ""
        try:
            for tag, kind, payload in self._events(events, call.tickets):
                if kind == "error":
                    self._sse({"error": {"message": payload, "type": "server_error"}})
                    status, error = 500, payload
                    break
                if kind == "done":
                    call.done[tag] = payload
                outs = [(payload[0], None)] if kind == "delta" else [(c.index, c) for c in payload.outputs]
                for index, final in outs:
                    ci = tag * n + index
                    text, first = texts.advance(ci, payload[1] if final is None else None, final)
                    scanner = scanners.setdefault(ci, req.scanner()) if first else scanners.get(ci)
                    for c in api.stream_chunks(req, model, call.tickets[tag].version, ci, text, first, scanner,
                                               final.finish_reason if final is not None else None):
                        self._sse(c)
            if status == 200:
                self.wfile.write(b"data: [DONE]\n\n")
        except (TimeoutError, BrokenPipeError, ConnectionResetError) as e:
            self._cancel(call)
            status, error = (504, str(e)) if isinstance(e, TimeoutError) else (CLIENT_CLOSED, "the client went away")
            if isinstance(e, TimeoutError):
                self._sse({"error": {"message": str(e), "type": "timeout_error"}})
        calls = [ToolCall(c.name, json.loads(c.arguments), id=c.id) for s in scanners.values() if s for c in s.calls]
        self.server.served(call.record(status, ids=ids, calls=calls, error=error))

    def start_events(self) -> None:
        """Answer 200 with a stream of server-sent events (the connection closes after it)."""
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True

    def _sse(self, obj: dict) -> None:
        self.wfile.write(b"data: " + json.dumps(obj).encode() + b"\n\n")
        self.wfile.flush()

    def _json(self, status: int, obj: dict, headers: dict[str, str] | None = None) -> None:
        self._send(status, json.dumps(obj).encode(), "application/json", headers)

    def _send(self, status: int, data: bytes, kind: str, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def _error(self, e: api.ApiError) -> None:
        headers = {"Retry-After": str(max(1, math.ceil(e.retry_after)))} if e.retry_after is not None else {}
        if e.status == 401:
            headers["WWW-Authenticate"] = "Bearer"
        self._json(e.status, e.body(), headers)


class Call:
    """One POST as it goes: who sent it, its tickets and what came back, its clock."""

    def __init__(self, server: Server, kind: str):
        self.server, self.kind = server, kind
        self.tenant: Tenant | None = None
        self.tickets: list[Ticket] = []
        self.done: dict[int, RequestOutput] = {}  # tag -> the finished output
        self.start, self.arrived = time.monotonic(), time.time()

    @property
    def version(self) -> int:
        """The policy version that generated it: the oldest of its tokens' (one, unless a prompt
        of several waited across a weight load)."""
        versions = [v for out in self.done.values() for c in out.outputs for v in c.versions[:1]]
        return min(versions, default=self.server.loop.version)

    @property
    def generated(self) -> int:
        return sum(len(c.token_ids) for out in self.done.values() for c in out.outputs)

    def record(self, status: int, ids: list[list[int]] = (), calls: list[ToolCall] = (), error: str = "") -> ServedRecord:
        tok, now = self.server.engine.tokenizer, time.monotonic()
        firsts = [t.first_token_at for t in self.tickets if t.first_token_at is not None]
        admitted = [t.admitted_at - t.queued_at for t in self.tickets if t.admitted_at is not None]
        texts = [c.text for tag in sorted(self.done) for c in self.done[tag].outputs]
        reasons = [c.finish_reason or "" for tag in sorted(self.done) for c in self.done[tag].outputs]
        return ServedRecord(
            time=self.arrived, tenant=self.tenant.name if self.tenant else "(unauthenticated)", kind=self.kind,
            model=self.server.model_name, version=self.version if self.done else -1, status=status,
            latency_s=now - self.start, ttft_s=min(firsts) - self.start if firsts else None,
            queue_s=max(admitted) if admitted else None, prompt_tokens=sum(map(len, ids)),
            completion_tokens=self.generated, prompt="\n".join(tok.decode(i, skip_special_tokens=False) for i in ids),
            completion=texts[0] if len(texts) == 1 else json.dumps(texts) if texts else "", finish_reason=",".join(dict.fromkeys(reasons)),
            error=error, tool_calls=tuple((0, c) for c in calls))


def _unauthorized() -> api.ApiError:
    return api.ApiError(401, "a valid API key is required (Authorization: Bearer <key>)", "authentication_error",
                        "invalid_api_key")


def _check_model(body: JSON, served: str) -> None:
    model = body.get("model") if isinstance(body, dict) else None
    if model is not None and model != served:
        raise api.ApiError(404, f"the model {model!r} does not exist: this server serves {served!r} (GET /v1/models)",
                           "not_found_error", "model_not_found")


class _StreamTexts:
    """Incremental text per choice; holds back what could still turn out to be a stop string."""

    def __init__(self, tokenizer, stop: tuple[str, ...]):
        self.tokenizer, self.holdback = tokenizer, max((len(s) for s in stop), default=1) - 1
        self.tokens: dict[int, list[int]] = {}
        self.sent: dict[int, int] = {}

    def advance(self, choice: int, new_tokens, final) -> tuple[str, bool]:
        first = choice not in self.tokens
        tokens = self.tokens.setdefault(choice, [])
        sent = self.sent.setdefault(choice, 0)
        if final is not None:
            text = final.text  # stop strings already cut
        else:
            tokens.extend(new_tokens)
            text = self.tokenizer.decode(tokens).rstrip("\ufffd")  # an incomplete character waits
            text = text[: max(sent, len(text) - self.holdback)]
        self.sent[choice] = max(sent, len(text))
        return text[sent:], first
