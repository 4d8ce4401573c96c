"""Served traffic on record: `ServedRecord` (one request or agent run, as the server saw it) and
`TrafficLog`, which writes them to `lineage.sqlite` in `serve.log_dir`, the store and writer
thread training uses (`LineageStore.write`), in tables of their own: `served` (tenant, kind,
model, version, HTTP status, latency, time to first token, queue wait, tokens, prompt and
completion in full, finish reason, error, an agent run's task and reward) and `served_tool_calls`
(each call with its arguments and, for an agent run's, its sandbox result, in the columns of
the training `tool_calls` table). `read_served` reads them back. It does not aggregate: the
dashboard (`tempering view`) and Prometheus (`serve.metrics`) do.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from tempering import lineage
from tempering.records import ToolCall

SCHEMA = f"""
CREATE TABLE IF NOT EXISTS served (
  id INTEGER PRIMARY KEY, time REAL NOT NULL, tenant TEXT NOT NULL, kind TEXT NOT NULL, model TEXT, version INTEGER,
  status INTEGER NOT NULL, latency_s REAL, ttft_s REAL, queue_s REAL, prompt_tokens INTEGER,
  completion_tokens INTEGER, prompt TEXT, completion TEXT, finish_reason TEXT, error TEXT, task TEXT, reward REAL,
  reward_reason TEXT);
CREATE INDEX IF NOT EXISTS served_time ON served(time);
CREATE TABLE IF NOT EXISTS served_tool_calls (
  served_id INTEGER NOT NULL REFERENCES served(id) ON DELETE CASCADE, {lineage.TOOL_CALL_COLUMNS});
CREATE INDEX IF NOT EXISTS served_tool_calls_id ON served_tool_calls(served_id);
"""
KINDS = ("completion", "chat", "agent_run")
CLIENT_CLOSED = 499  # the status recorded when the client went away before the answer (as nginx logs it)


@dataclass(frozen=True)
class ServedRecord:
    time: float  # wall clock when the request arrived
    tenant: str
    kind: str  # one of KINDS
    model: str
    version: int  # the policy version that served it (-1: none ran)
    status: int  # the HTTP status answered
    latency_s: float  # arrival to the last byte
    ttft_s: float | None = None  # arrival to the first generated token
    queue_s: float | None = None  # waiting for the engine (its first turn's, for an agent run)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    prompt: str = ""
    completion: str = ""
    finish_reason: str = ""
    error: str = ""
    tool_calls: tuple[tuple[int, ToolCall], ...] = ()  # (turn, call): what the model called
    task: str = ""  # an agent run's task id
    reward: float | None = None  # an agent run's reward total (None: not scored)
    reward_reason: str = ""

    @property
    def per_token_s(self) -> float | None:
        """Seconds per generated token after the first (None with fewer than two)."""
        if self.ttft_s is None or self.completion_tokens < 2:
            return None
        return max(self.latency_s - self.ttft_s, 0.0) / (self.completion_tokens - 1)


class TrafficLog:
    def __init__(self, log_dir: str | Path):
        self.dir = Path(log_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        with contextlib.closing(lineage.connect(self.dir / lineage.FILENAME)) as db:
            db.executescript(SCHEMA)  # here, so that a bad file fails at start-up
        self._store = lineage.LineageStore(self.dir)

    def record(self, r: ServedRecord) -> None:
        self._store.write(lambda db: _insert(db, r))

    def flush(self) -> None:
        self._store.flush()

    def close(self) -> None:
        self._store.close()


def _insert(db: sqlite3.Connection, r: ServedRecord) -> None:
    cur = db.execute(
        "INSERT INTO served (time, tenant, kind, model, version, status, latency_s, ttft_s, queue_s, prompt_tokens,"
        " completion_tokens, prompt, completion, finish_reason, error, task, reward, reward_reason)"
        " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
        (r.time, r.tenant, r.kind, r.model, r.version, r.status, r.latency_s, r.ttft_s, r.queue_s, r.prompt_tokens,
         r.completion_tokens, r.prompt, r.completion, r.finish_reason, r.error, r.task, r.reward, r.reward_reason))
    positions: dict[int, int] = {}
    rows = []
    for turn, c in r.tool_calls:
        position = positions[turn] = positions.get(turn, -1) + 1
        rows.append((cur.lastrowid, turn, position, c.name, json.dumps(dict(c.arguments), default=str), c.output,
                     c.error, c.error_kind, *lineage.exec_columns(c)))
    db.executemany("INSERT INTO served_tool_calls VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", rows)


def has_served(db: sqlite3.Connection) -> bool:
    return db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'served'").fetchone() is not None


def read_served(log_dir: str | Path) -> list[dict]:
    """Every served row in `log_dir`'s store, in the order recorded, as column -> value dicts
    (with its tool calls under "tool_calls")."""
    with contextlib.closing(lineage.open_read_only(Path(log_dir))) as db:
        if not has_served(db):
            return []
        cur = db.execute("SELECT * FROM served ORDER BY id")
        names = [d[0] for d in cur.description]
        rows = [dict(zip(names, r)) for r in cur.fetchall()]
        cur = db.execute("SELECT * FROM served_tool_calls ORDER BY served_id, turn, position")
        call_names = [d[0] for d in cur.description]
        calls: dict[int, list[dict]] = {}
        for r in cur.fetchall():
            calls.setdefault(r[0], []).append(dict(zip(call_names, r)))
    return [{**r, "tool_calls": calls.get(r["id"], [])} for r in rows]
