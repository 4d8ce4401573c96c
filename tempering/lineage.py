"""`LineageStore`: every sample's lineage in `lineage.sqlite` (SQLite, WAL) in the run directory,
and the one-line-per-sample summary `samples.jsonl` beside it; `read_samples` reads the store.

A sample's row holds its run step, task and domain, prompt and completion in full, finish reason,
turns, reward (total, components, weights, failure and reason), the policy versions that produced
it (min, max, and the per-token list run-length encoded) and its fate: `trained` in that step, or
dropped as the buffer decides (`stale`, `failed`, `uniform`, `alone`). Each tool call is a row of
`tool_calls` keyed by its sample, with its `ExecResult` (how the command ended, its output, wall
and CPU seconds, peak memory, cold or warm start): the sandbox telemetry the trajectory carries.
The sandbox's own per-execution log stays in `sandbox.jsonl` (sandbox.telemetry); this module
does not copy it.

Writes leave the training loop's critical path: `record` only queues (a bounded queue; a full one
waits, under the deadline), and a writer thread turns what is queued into rows and commits one
transaction per batch. `flush` waits for everything queued so far, `close` flushes and stops the
thread. A run killed with SIGKILL loses at most what was not yet committed; what was committed is
consistent (SQLite's transactions). `write` queues rows of other tables through the same writer
(served traffic's). `rewind` drops the steps a resumed run will redo. It neither
aggregates nor serves: readers open it read-only through `read_samples` / `read_tool_calls`, or
`open_read_only` for queries of their own (the dashboard's).
"""

from __future__ import annotations

import contextlib
import json
import queue
import sqlite3
import threading
import time
from dataclasses import dataclass
from itertools import groupby
from pathlib import Path
from typing import Callable, Union

from tempering.errors import UserError
from tempering.jsonvalue import JSONObject
from tempering.records import Group, ToolCall, Trajectory
from tempering.runtime.interface import Stall

FILENAME = "lineage.sqlite"
JSONL = "samples.jsonl"
BATCH = 512  # rows per transaction at most: one commit (an fsync-free WAL append) per batch
# what the writer's queue carries: a sample (group, index, fate, step), a flush to signal, rows of
# another table, or None (the end)
Item = Union[tuple[Group, int, str, int], threading.Event, Callable[[sqlite3.Connection], None], None]

# A tool call's columns after its owner's key: the training `tool_calls` and served_tool_calls.
TOOL_CALL_COLUMNS = """turn INTEGER, position INTEGER,
  name TEXT, arguments TEXT, output TEXT, error TEXT, error_kind TEXT, exec_reason TEXT, exit_code INTEGER,
  stdout TEXT, stderr TEXT, truncated INTEGER, wall_s REAL, cpu_s REAL, peak_memory_mb REAL, start TEXT,
  exec_error TEXT, files TEXT"""
SCHEMA = f"""
CREATE TABLE IF NOT EXISTS samples (
  id INTEGER PRIMARY KEY, step INTEGER NOT NULL, task TEXT NOT NULL, domain TEXT NOT NULL,
  sample_index INTEGER NOT NULL, fate TEXT NOT NULL, prompt TEXT NOT NULL, completion TEXT NOT NULL,
  finish_reason TEXT, tokens INTEGER, version_min INTEGER, version_max INTEGER, versions TEXT,
  reward REAL, components TEXT, weights TEXT, failed INTEGER, reason TEXT, turns TEXT);
CREATE INDEX IF NOT EXISTS samples_step ON samples(step);
CREATE TABLE IF NOT EXISTS tool_calls (
  sample_id INTEGER NOT NULL REFERENCES samples(id) ON DELETE CASCADE, {TOOL_CALL_COLUMNS});
CREATE INDEX IF NOT EXISTS tool_calls_sample ON tool_calls(sample_id);
"""


@dataclass(frozen=True)
class SampleRecord:
    """One row of `samples` as `read_samples` gives it back (JSON columns decoded)."""

    id: int
    step: int
    task: str
    domain: str
    sample_index: int
    fate: str
    prompt: str
    completion: str
    finish_reason: str
    tokens: int
    version_min: int
    version_max: int
    versions: list[list[int]]  # [[version, count], ...] over the completion's tokens (-1: tool output)
    reward: float
    components: dict[str, float]
    weights: dict[str, float]
    failed: bool
    reason: str
    turns: list[list]  # [[role, start, end], ...]; [] for a single-turn sample


class LineageStore:
    """Records each sample once, off the caller's thread. `path` None: records nothing."""

    def __init__(self, run_dir: Path | None, deadline_s: float = 120.0, maxsize: int = 65536):
        self.deadline_s = deadline_s
        self.writer_cpu_s = 0.0  # CPU seconds the writer thread has spent (its cost to the run)
        self._queue: queue.Queue[Item] = queue.Queue(maxsize)
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        if run_dir is not None:
            db = connect(Path(run_dir) / FILENAME)  # opened here so a bad file fails at start-up
            self._thread = threading.Thread(target=self._write_loop, args=(db, Path(run_dir) / JSONL),
                                            name="lineage-writer", daemon=True)
            self._thread.start()

    def record(self, group: Group, i: int, fate: str, step: int) -> None:
        if self._thread is not None:
            self._put((group, i, fate, step))

    def flush(self) -> None:
        """Wait until everything recorded so far is committed (a Stall past the deadline)."""
        if self._thread is None:
            return
        done = threading.Event()
        self._put(done)
        if not done.wait(self.deadline_s):
            raise Stall(f"lineage store: the writer did not commit within {self.deadline_s:.0f} s")
        self._raise_error()

    def close(self) -> None:
        if self._thread is None:
            return
        thread = self._thread
        try:
            self.flush()
        finally:
            with contextlib.suppress(queue.Full):  # full only when the writer is stuck: flush raised that
                self._queue.put_nowait(None)
            self._thread = None
        thread.join(self.deadline_s)

    def _put(self, item: Item) -> None:
        self._raise_error()
        try:
            self._queue.put(item, timeout=self.deadline_s)
        except queue.Full:
            raise Stall(f"lineage store: its queue stayed full for {self.deadline_s:.0f} s") from None

    def _raise_error(self) -> None:
        if self._error is not None:
            raise RuntimeError(f"lineage store: the writer failed: {self._error!r}") from self._error

    def write(self, rows: Callable[[sqlite3.Connection], None]) -> None:
        """Queue rows of another table (`rows` inserts them, in the writer's thread and batch
        transaction): what serving records (`tempering.serve.traffic`) shares the writer."""
        if self._thread is not None:
            self._put(rows)

    def _write_loop(self, db: sqlite3.Connection, jsonl: Path) -> None:
        summary = None  # samples.jsonl, opened when the first sample comes (a served log has none)
        while True:
            items = [self._queue.get()]
            while len(items) < BATCH and items[-1] is not None:
                try:
                    items.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            cpu = time.thread_time()
            rows = [x for x in items if isinstance(x, tuple)]
            other = [x for x in items if callable(x) and not isinstance(x, threading.Event)]
            try:
                if rows and summary is None:
                    summary = open(jsonl, "a")
                if (rows or other) and self._error is None:
                    _commit(db, summary, rows, other)
            except Exception as e:  # the thread's fault boundary: re-raised by the loop's next call
                self._error = e
            self.writer_cpu_s += time.thread_time() - cpu
            for x in items:
                if isinstance(x, threading.Event):
                    x.set()
            if items[-1] is None:
                db.close()
                if summary is not None:
                    summary.close()
                return


def _commit(db: sqlite3.Connection, summary, rows: list[tuple[Group, int, str, int]],
            other: list[Callable[[sqlite3.Connection], None]] = ()) -> None:
    with db:  # one transaction for the batch
        for write in other:
            write(db)
        for group, i, fate, step in rows:
            t, r = group.trajectories[i], group.rewards[i]
            model = [v for v, m in zip(t.versions, t.loss_mask) if m]
            cur = db.execute(
                "INSERT INTO samples (step, task, domain, sample_index, fate, prompt, completion, finish_reason,"
                " tokens, version_min, version_max, versions, reward, components, weights, failed, reason, turns)"
                " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (step, t.task_id, t.domain, t.sample_index, fate, group.task.prompt, t.text, t.finish_reason,
                 t.num_model_tokens, min(model, default=-1), max(model, default=-1), _runs(t.versions),
                 r.total, json.dumps(dict(r.components)), json.dumps(dict(r.weights)), int(r.failed), r.reason,
                 json.dumps([[x.role, x.start, x.end] for x in t.turns])))
            db.executemany("INSERT INTO tool_calls VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                           _tool_rows(cur.lastrowid, t))
            summary.write(json.dumps(_summary(group, i, fate, step, min(model, default=-1),
                                              max(model, default=-1))) + "\n")
    if summary is not None:
        summary.flush()


def _runs(versions: list[int]) -> str:
    """The per-token versions, run-length encoded: [[version, count], ...]."""
    return json.dumps([[v, sum(1 for _ in run)] for v, run in groupby(versions)])


def _tool_rows(sample_id: int, t: Trajectory) -> list[tuple]:
    rows = []
    for turn_no, turn in enumerate(t.turns):
        for position, c in enumerate(turn.tool_calls):
            rows.append((sample_id, turn_no, position, c.name, json.dumps(dict(c.arguments), default=str),
                         c.output, c.error, c.error_kind, *exec_columns(c)))
    return rows


def exec_columns(c: ToolCall) -> tuple:
    """A call's sandbox result as the tool_calls table's columns from exec_reason on (None without one)."""
    e = c.result
    if e is None:
        return (None,) * 11
    return (e.reason.value, e.exit_code, e.stdout, e.stderr, int(e.truncated), e.wall_s, e.cpu_s,
            e.peak_memory_mb, e.start, e.error, json.dumps(sorted(e.files)))


def _summary(group: Group, i: int, fate: str, step: int, vmin: int, vmax: int) -> JSONObject:
    """The `samples.jsonl` line: what a glance needs, texts cut at 200 characters."""
    t, r = group.trajectories[i], group.rewards[i]
    return {"step": step, "task": t.task_id, "domain": t.domain, "prompt": group.task.prompt[:200],
            "sample": t.sample_index, "fate": fate, "versions": [vmin, vmax], "tokens": t.num_model_tokens,
            "reward": r.total, "components": dict(r.components), "failed": r.failed, "reason": r.reason,
            "text": t.text[:200]}


def connect(path: Path) -> sqlite3.Connection:
    """The store at `path` opened for writing (created if missing), in WAL mode."""
    try:
        db = sqlite3.connect(path, check_same_thread=False, isolation_level="DEFERRED")
        db.execute("PRAGMA journal_mode=WAL")
        # no fsync per commit: a killed process loses no commit, a power loss only the last ones
        db.execute("PRAGMA synchronous=NORMAL")
        db.execute("PRAGMA foreign_keys=ON")
        db.executescript(SCHEMA)
    except sqlite3.DatabaseError as e:
        raise UserError(f"{path}: not a lineage store ({e})") from None
    return db


def rewind(run_dir: Path, step: int) -> None:
    """Drop the samples of steps >= `step` (and their tool calls), which a resumed run redoes."""
    path = Path(run_dir) / FILENAME
    if not path.exists():
        return
    db = connect(path)
    with db:
        db.execute("DELETE FROM samples WHERE step >= ?", (step,))
    db.close()


def open_read_only(run_dir: Path) -> sqlite3.Connection:
    path = Path(run_dir) / FILENAME
    if not path.is_file():
        raise UserError(f"{path}: no lineage store (is {run_dir} a run directory?)")
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        db.execute("SELECT count(*) FROM samples").fetchone()
    except sqlite3.DatabaseError as e:
        raise UserError(f"{path}: unreadable lineage store ({e})") from None
    return db


def read_samples(run_dir: Path) -> list[SampleRecord]:
    """Every sample of the store in `run_dir`, in the order recorded."""
    db = open_read_only(run_dir)
    try:
        rows = db.execute("SELECT * FROM samples ORDER BY id").fetchall()
    finally:
        db.close()
    return [SampleRecord(*r[:12], json.loads(r[12]), r[13], json.loads(r[14]), json.loads(r[15]), bool(r[16]),
                         r[17], json.loads(r[18])) for r in rows]


def read_tool_calls(run_dir: Path, sample_id: int) -> list[JSONObject]:
    """The tool calls of one sample, in the order made, as column -> value dicts."""
    db = open_read_only(run_dir)
    try:
        cur = db.execute("SELECT * FROM tool_calls WHERE sample_id = ? ORDER BY turn, position", (sample_id,))
        names = [d[0] for d in cur.description]
        return [dict(zip(names, r)) for r in cur.fetchall()]
    finally:
        db.close()
