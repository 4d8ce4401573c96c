"""`tempering serve`: an OpenAI-compatible HTTP server on the engine.

`EngineLoop` owns the engine in one thread, steps it while requests are live and publishes what
each step returns (new tokens, finished outputs); HTTP handler threads (stdlib
`ThreadingHTTPServer`) validate a request, hand it to the loop through a queue and wait on their
own event queue with a deadline (`engine.request_timeout_s`, then 504). Routes:
GET /health, GET /v1/models, GET /kv_usage (the engine's KV bytes: held by sequences, cached,
free, swapped, resident in memory, in the offload file), POST /v1/completions, POST /v1/chat/completions (`stream` as
server-sent events, `n` > 1, several prompts). Bad requests get 4xx JSON errors in OpenAI's
shape. No authentication and no TLS: put it behind a proxy for anything public.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import queue
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from tempering.engine import api
from tempering.engine.kv_usage import KVUsage
from tempering.engine.llm_engine import LLM
from tempering.engine.sampling_params import SamplingParams

MAX_BODY = 1 << 20


@dataclass(eq=False)
class Ticket:
    """One engine request as a handler sees it; events arrive as (tag, kind, payload)."""
    events: queue.Queue
    tag: int
    stream: bool
    request_id: int | None = None
    sent: list[int] = field(default_factory=list)  # tokens already published, per sample


class EngineLoop:
    def __init__(self, engine: LLM, idle_poll_s: float = 0.05):
        self.engine, self.idle_poll_s = engine, idle_poll_s
        self.inbox: queue.Queue = queue.Queue()
        self.live: dict[int, Ticket] = {}
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="engine-loop", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stop.set()
        self.thread.join(timeout_s)

    def submit(self, ids: list[int], params: SamplingParams, events: queue.Queue, tag: int, stream: bool) -> Ticket:
        ticket = Ticket(events, tag, stream, sent=[0] * params.n)
        self.inbox.put(("add", ticket, ids, params))
        return ticket

    def cancel(self, ticket: Ticket) -> None:
        self.inbox.put(("abort", ticket, None, None))

    def kv_usage(self, timeout_s: float) -> KVUsage:
        """The engine's `kv_usage`, read between steps in the loop's thread (the engine is not
        thread-safe). Raises queue.Empty past `timeout_s`."""
        reply: queue.Queue = queue.Queue(maxsize=1)
        self.inbox.put(("kv_usage", reply, None, None))
        return reply.get(timeout=timeout_s)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._drain(wait=not self.engine.has_unfinished())
            if not self.engine.has_unfinished():
                continue
            try:
                outputs = self.engine.step()
            except Exception as e:  # noqa: BLE001 - fault boundary: fail the live requests, keep serving
                for ticket in self.live.values():
                    with contextlib.suppress(ValueError):  # the failed step may have finished it already
                        self.engine.abort(ticket.request_id)
                    ticket.events.put((ticket.tag, "error", f"engine failure: {type(e).__name__}: {e}"))
                self.live.clear()
                continue
            self._publish(outputs)

    def _drain(self, wait: bool) -> None:
        try:
            item = self.inbox.get(timeout=self.idle_poll_s) if wait else self.inbox.get_nowait()
        except queue.Empty:
            return
        while True:
            op, ticket, ids, params = item
            if op == "add":
                ticket.request_id = self.engine.add_request(ids, params)
                self.live[ticket.request_id] = ticket
            elif op == "kv_usage":
                ticket.put(self.engine.kv_usage())  # `ticket` is the asker's reply queue
            elif ticket.request_id in self.live:
                self.live.pop(ticket.request_id)
                self.engine.abort(ticket.request_id)
            try:
                item = self.inbox.get_nowait()
            except queue.Empty:
                return

    def _publish(self, outputs) -> None:
        # A sample that finishes before its request is not streamed on its own: its text (stop
        # strings cut) comes with "done".
        for out in outputs:
            ticket = self.live.get(out.request_id)
            if ticket is None:
                continue
            if ticket.stream:
                for c in out.outputs:
                    if out.finished or not c.finished():
                        self._delta(ticket, c.index, c.token_ids)
            if out.finished:
                del self.live[out.request_id]
                ticket.events.put((ticket.tag, "done", out))

    @staticmethod
    def _delta(ticket: Ticket, index: int, tokens: list[int]) -> None:
        if len(tokens) > ticket.sent[index]:
            ticket.events.put((ticket.tag, "delta", (index, tokens[ticket.sent[index]:])))
            ticket.sent[index] = len(tokens)


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, engine: LLM, host: str = "127.0.0.1", port: int = 8000, model_name: str = "tempering"):
        if engine.tokenizer is None:
            raise ValueError("serve: the engine needs a tokenizer")
        super().__init__((host, port), Handler)
        self.engine, self.model_name = engine, model_name
        self.loop = EngineLoop(engine)
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
        self.loop.stop()


class Handler(BaseHTTPRequestHandler):
    server: Server
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt: str, *args: Any) -> None:  # keep test and server output quiet
        pass

    def do_GET(self) -> None:
        if self.path == "/health":
            return self._json(200, {"status": "ok"})
        if self.path == "/kv_usage":
            try:
                usage = self.server.loop.kv_usage(self.server.engine.cfg.request_timeout_s)
            except queue.Empty:
                return self._json(504, api.ApiError(504, "the engine loop did not answer within "
                                                    "engine.request_timeout_s", "timeout_error").body())
            return self._json(200, usage.as_dict())
        if self.path == "/v1/models":
            return self._json(200, {"object": "list", "data": [
                {"id": self.server.model_name, "object": "model", "owned_by": "tempering"}]})
        self._json(404, api.ApiError(404, f"no route GET {self.path}", "not_found_error").body())

    def do_POST(self) -> None:
        routes = {"/v1/completions": False, "/v1/chat/completions": True}
        try:
            if self.path not in routes:
                raise api.ApiError(404, f"no route POST {self.path}", "not_found_error")
            engine = self.server.engine
            req = api.parse(self._body(), routes[self.path], engine.tokenizer, engine.cfg.max_request_sequences)
            ids = [engine.check(p, req.params) for p in req.prompts]
        except api.ApiError as e:
            return self._json(e.status, e.body())
        except ValueError as e:
            return self._json(400, api.ApiError(400, str(e)).body())
        (self._stream if req.stream else self._complete)(req, ids)

    def _body(self) -> Any:
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            raise api.ApiError(411, "a Content-Length header is required") from None
        if length > MAX_BODY:
            raise api.ApiError(413, f"request body over {MAX_BODY} bytes")
        try:
            return json.loads(self.rfile.read(length) or b"null")
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise api.ApiError(400, f"the body is not valid JSON: {e}") from None

    def _submit(self, req: api.ApiRequest, ids: list[list[int]]) -> tuple[queue.Queue, list[Ticket]]:
        events: queue.Queue = queue.Queue()
        return events, [self.server.loop.submit(i, req.params, events, tag, req.stream) for tag, i in enumerate(ids)]

    def _events(self, events: queue.Queue, tickets: list[Ticket]):
        """Yield (tag, kind, payload) until every ticket is done; TimeoutError past the deadline."""
        deadline = time.monotonic() + self.server.engine.cfg.request_timeout_s
        open_tags = {t.tag for t in tickets}
        while open_tags:
            try:
                tag, kind, payload = events.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise TimeoutError(f"no result within engine.request_timeout_s = "
                                   f"{self.server.engine.cfg.request_timeout_s}") from None
            if kind in ("done", "error"):
                open_tags.discard(tag)
            yield tag, kind, payload

    def _complete(self, req: api.ApiRequest, ids: list[list[int]]) -> None:
        events, tickets = self._submit(req, ids)
        done: dict[int, Any] = {}
        try:
            for tag, kind, payload in self._events(events, tickets):
                if kind == "error":
                    return self._json(500, api.ApiError(500, payload, "server_error").body())
                if kind == "done":
                    done[tag] = payload
        except TimeoutError as e:
            for t in tickets:
                self.server.loop.cancel(t)
            return self._json(504, api.ApiError(504, str(e), "timeout_error").body())
        n, tok = req.params.n, self.server.engine.tokenizer
        choices = [api.choice(req, tag * n + c.index, c, tok) for tag in sorted(done) for c in done[tag].outputs]
        generated = sum(len(c.token_ids) for out in done.values() for c in out.outputs)
        self._json(200, api.response(req, self.server.model_name, choices, sum(map(len, ids)), generated))

    def _stream(self, req: api.ApiRequest, ids: list[list[int]]) -> None:
        events, tickets = self._submit(req, ids)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        texts = _StreamTexts(self.server.engine.tokenizer, req.params.stop)
        n = req.params.n
        try:
            for tag, kind, payload in self._events(events, tickets):
                if kind == "error":
                    self._sse({"error": {"message": payload, "type": "server_error"}})
                    break
                outs = [(payload[0], None)] if kind == "delta" else [(c.index, c) for c in payload.outputs]
                for index, final in outs:
                    text, first = texts.advance(tag * n + index, payload[1] if final is None else None, final)
                    if text or final is not None or first:
                        self._sse(api.chunk(req, self.server.model_name, tag * n + index, text,
                                            final.finish_reason if final is not None else None, first))
            self.wfile.write(b"data: [DONE]\n\n")
        except (TimeoutError, BrokenPipeError, ConnectionResetError) as e:
            for t in tickets:
                self.server.loop.cancel(t)
            if isinstance(e, TimeoutError):
                self._sse({"error": {"message": str(e), "type": "timeout_error"}})

    def _sse(self, obj: dict) -> None:
        self.wfile.write(b"data: " + json.dumps(obj).encode() + b"\n\n")
        self.wfile.flush()

    def _json(self, status: int, obj: dict) -> None:
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


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


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register `tempering serve` on the CLI's subparsers."""
    p = subparsers.add_parser("serve", help="serve a model folder over an OpenAI-compatible HTTP API",
                              description="Engine overrides: --engine.key=value, e.g. --engine.kv_dtype=int8")
    p.add_argument("model", help="a folder with config.json, model.safetensors and tokenizer.json, or a .gguf file")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--name", help="the model id clients send (default: the folder's name)")
    p.add_argument("--config", help="TOML config file; only its [engine] section is used")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch's default)")
    p.set_defaults(handler=run_serve)


def run_serve(args: argparse.Namespace, overrides: list[str]) -> int:
    import torch

    from tempering.config import load_config
    from tempering.models import load_hf
    from tempering.models.gguf_file import local_model
    from tempering.tokenizer import load_tokenizer

    cfg = load_config(args.config, overrides).engine
    if args.threads:
        torch.set_num_threads(args.threads)
    folder = local_model(args.model)  # a .gguf file is converted once into the cache
    engine = LLM(load_hf(folder), load_tokenizer(folder), cfg)
    server = Server(engine, args.host, args.port, args.name or Path(args.model).resolve().name)
    server.loop.start()
    print(f"[tempering] serving {server.model_name} on http://{args.host}:{server.server_address[1]}/v1", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        server.loop.stop()
    return 0
