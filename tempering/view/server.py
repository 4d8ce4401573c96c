"""The HTTP server of `tempering view RUN_DIR`: a JSON API over `RunData` and the static page.

GET only. `/` is the page; `/static/*` its script and style, and plotly.min.js from the installed
plotly package (no CDN: the dashboard works offline). The API: `/api/run`, `/api/metrics[?keys=a,b]`,
`/api/domains`, `/api/samples?domain=&fate=&reward_min=&reward_max=&step_min=&step_max=&limit=&offset=`,
`/api/sample/<id>`, `/api/sandbox`, `/api/staleness`, and served traffic (`tempering serve`'s
`serve.log_dir`): `/api/served`, `/api/served/requests?tenant=&kind=&status=&limit=&offset=`,
`/api/served/<id>`. A bad parameter is HTTP 400 with a JSON error
naming it; an unknown path or sample is 404; an unreadable store is 500 with its one-line message.
`start_view` runs it on a thread (tests use port 0); `tempering view` serves in the foreground. It
reads nothing itself (data.py does) and neither authenticates nor writes: bind it to localhost.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

from tempering.errors import UserError
from tempering.jsonvalue import JSON
from tempering.view import traffic
from tempering.view.data import BadParameter, RunData

STATIC = Path(__file__).parent / "static"
PAGES = {"/": ("index.html", "text/html; charset=utf-8"), "/index.html": ("index.html", "text/html; charset=utf-8"),
         "/static/app.js": ("app.js", "text/javascript; charset=utf-8"),
         "/static/app.css": ("app.css", "text/css; charset=utf-8")}
DEFAULT_PORT = 8265


def plotly_js() -> Path:
    """The charting library the page loads, as the plotly Python package ships it."""
    try:
        import plotly
    except ImportError:
        raise UserError("plotly is not installed (pip install 'plotly>=5'): the page's charts need it") from None
    path = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
    if not path.is_file():
        raise UserError(f"{path}: missing from the plotly package (reinstall plotly)")
    return path


class ViewServer(ThreadingHTTPServer):
    """Serves one run directory; `url` is where, with the port the OS picked for port 0."""

    daemon_threads = True  # a browser's open connection must not keep the process alive

    def __init__(self, run_dir: str | Path, host: str = "127.0.0.1", port: int = DEFAULT_PORT):
        self.data = RunData(run_dir)  # a bad directory fails here, before anything listens
        if not 0 <= port <= 65535:
            raise UserError(f"--port {port}: not a port (0-65535; 0 picks a free one)")
        self.plotly = plotly_js()
        try:
            super().__init__((host, port), Handler)
        except OSError as e:
            raise UserError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
        self.host = host

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.server_address[1]}/"


class Handler(BaseHTTPRequestHandler):
    server: ViewServer

    def log_message(self, format: str, *args: object) -> None:
        pass  # the page polls every few seconds: one line per request would bury everything else

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        try:
            if url.path.startswith("/api/"):
                self._api(url.path, dict(parse_qsl(url.query, keep_blank_values=True)))
            elif url.path in PAGES:
                name, kind = PAGES[url.path]
                self._send(200, (STATIC / name).read_bytes(), kind, "no-cache")
            elif url.path == "/favicon.ico":
                self._send(204, b"", "image/x-icon", "max-age=86400")  # none: spares the browser's console a 404
            elif url.path == "/static/plotly.min.js":
                self._send(200, self.server.plotly.read_bytes(), "text/javascript; charset=utf-8", "max-age=86400")
            else:
                self._json(404, {"error": f"no such path: {url.path}"})
        except BadParameter as e:
            self._json(400, {"error": str(e), "parameter": e.name})
        except UserError as e:  # the store is unreadable (or not yet complete): say so, keep serving
            self._json(500, {"error": str(e)})
        except (BrokenPipeError, ConnectionResetError):
            pass  # the browser went away mid-answer

    def _api(self, path: str, params: dict[str, str]) -> None:
        data = self.server.data
        routes = {"/api/run": data.run, "/api/domains": data.domains, "/api/sandbox": data.sandbox,
                  "/api/staleness": data.staleness}
        if path in routes:
            return self._json(200, routes[path]())
        if path == "/api/metrics":
            return self._json(200, data.metrics([k for k in params.get("keys", "").split(",") if k] or None))
        if path == "/api/samples":
            return self._json(200, data.samples(params))
        if path == "/api/served":
            return self._json(200, data.traffic(traffic.summary, empty={"served": False, "tenants": [], "timeline": []}))
        if path == "/api/served/requests":
            return self._json(200, data.traffic(traffic.requests, params, empty={"requests": [], "total": 0}))
        match = re.fullmatch(r"/api/served/([^/]+)", path)
        if match is not None:
            served_id = _id(match[1])
            found = data.traffic(traffic.request, served_id)
            return self._json(200, found) if found else self._json(404, {"error": f"no served request {served_id}"})
        match = re.fullmatch(r"/api/sample/([^/]+)", path)
        if match is None:
            return self._json(404, {"error": f"no such path: {path}"})
        sample = data.sample(_id(match[1]))
        if sample is None:
            return self._json(404, {"error": f"no sample {match[1]}"})
        self._json(200, sample)

    def _json(self, status: int, obj: JSON) -> None:
        try:
            body = json.dumps(obj, allow_nan=False)
        except ValueError:  # NaN or inf in a metric: JSON has no such numbers, the page shows a gap
            body = json.dumps(_finite(obj))
        self._send(status, body.encode(), "application/json", "no-store")

    def _send(self, status: int, body: bytes, kind: str, cache: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", cache)
        self.end_headers()
        self.wfile.write(body)


def _id(text: str) -> int:
    if not text.isdigit() or len(text) > 18:  # an SQLite integer has at most 19 digits
        raise BadParameter("id", f"{text!r} is not an id (an integer)")
    return int(text)


def _finite(obj: JSON) -> JSON:
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_finite(v) for v in obj]
    return obj


def start_view(run_dir: str | Path, host: str = "127.0.0.1", port: int = 0) -> tuple[ViewServer, threading.Thread, str]:
    """Serve `run_dir` on a daemon thread: (server, thread, url). Stop with server.shutdown(); server.server_close()."""
    server = ViewServer(run_dir, host, port)
    thread = threading.Thread(target=server.serve_forever, name="tempering-view", daemon=True)
    thread.start()
    return server, thread, server.url


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register `tempering view` on the CLI's subparsers."""
    p = subparsers.add_parser("view", help="a web dashboard of a run directory (live or finished)")
    p.add_argument("run_dir", help="a run directory: metrics.jsonl, lineage.sqlite, sandbox.jsonl, ...")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default: %(default)s, this machine only)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help="port (default: %(default)s; 0: any free port)")
    p.set_defaults(handler=run_view)


def run_view(args: argparse.Namespace, _: list[str]) -> int:
    server = ViewServer(args.run_dir, args.host, args.port)
    print(f"[tempering] viewing {server.data.dir} on {server.url}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0
