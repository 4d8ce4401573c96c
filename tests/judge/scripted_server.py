"""A scripted OpenAI-style /v1/chat/completions endpoint on a real local socket (stdlib http.server
in a thread): each request is answered by `script(n, body)` (n counts requests from 1), which
returns a `Step`. The server counts requests, connections and the most requests in flight at once."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable


@dataclass
class Step:
    status: int = 200
    content: str = "SCORE: 5"  # the reply's message content (status 200), or the error message
    delay_s: float = 0.0  # before answering
    trickle_s: float = 0.0  # > 0: send the body one byte per this many seconds
    raw: bytes | None = None  # the body as is, instead of a chat completion
    hang_up: bool = False  # close the connection after answering, without saying so (a stale keep-alive)


def reply(content: str) -> Step:
    return Step(content=content)


class ScriptedServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, script: Callable[[int, dict], Step]):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.script = script
        self.lock = threading.Lock()
        self.requests = 0
        self.in_flight = 0
        self.max_in_flight = 0
        self.connections: set[tuple] = set()
        self.bodies: list[dict] = []
        self.headers: list[dict] = []
        self.released = threading.Event()  # set at close: slow handlers stop waiting
        self.thread = threading.Thread(target=self.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"

    def __enter__(self) -> "ScriptedServer":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.released.set()
        self.shutdown()
        self.server_close()


class _Handler(BaseHTTPRequestHandler):
    server: ScriptedServer
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args) -> None:
        pass

    def do_POST(self) -> None:
        srv = self.server
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with srv.lock:
            srv.requests += 1
            n = srv.requests
            srv.bodies.append(body)
            srv.headers.append(dict(self.headers))
            srv.connections.add(self.client_address)
            srv.in_flight += 1
            srv.max_in_flight = max(srv.max_in_flight, srv.in_flight)
        try:
            assert self.path == "/v1/chat/completions", self.path
            step = srv.script(n, body)
            if step.delay_s:
                srv.released.wait(step.delay_s)
            if step.raw is not None:
                data = step.raw
            elif step.status == 200:
                data = json.dumps({"id": f"chatcmpl-{n}", "object": "chat.completion", "model": body["model"],
                                   "choices": [{"index": 0, "finish_reason": "stop",
                                                "message": {"role": "assistant", "content": step.content}}]}).encode()
            else:
                data = json.dumps({"error": {"message": step.content, "type": "x", "code": step.status}}).encode()
            self.send_response(step.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if step.trickle_s:
                for i in range(len(data)):
                    if srv.released.wait(step.trickle_s):
                        return
                    self.wfile.write(data[i: i + 1])
                    self.wfile.flush()
            else:
                self.wfile.write(data)
            if step.hang_up:
                self.close_connection = True
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        finally:
            with srv.lock:
                srv.in_flight -= 1


def wait_until(predicate, timeout_s: float = 5.0) -> bool:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.01)
    return predicate()
