"""Reads a run directory for `tempering view` into JSON-able dicts: run status, metrics, domains,
the sandbox log, and samples queried (read-only, `?` parameters only) from the lineage store.

`RunData` checks the directory once (a missing path, or neither metrics.jsonl nor lineage.sqlite:
a `UserError`), then reads on demand. JSONL files are read incrementally, cached by inode, size and
mtime: a poll of a live run reads only what was appended, and a half-written last line (no newline
yet) waits for the next read. No lineage store yet is an empty sample list with a note. It does
not serve HTTP (server.py does), draw, or write anything."""

from __future__ import annotations

import contextlib
import json
import math
import threading
from collections import Counter
from pathlib import Path
from typing import Callable, TypeVar

from tempering import lineage
from tempering.errors import UserError
from tempering.jsonvalue import JSON, JSONObject

METRICS, SANDBOX = "metrics.jsonl", "sandbox.jsonl"
FATES = ("trained", "stale", "failed", "uniform", "alone")
SPARK_POINTS = 120  # a sparkline needs no more; keeps /api/domains small at thousands of steps
MAX_LIMIT = 500
# a domain's fields come from "reward/domain/<d>", "outcome/<d>" (pass rate) and "scheduler/<field>/<d>"
SCHEDULER_FIELDS = ("share_target", "share", "weight", "level")
UTILISATION = ("trainer_busy", "trainer_idle", "engine_busy", "sandbox_busy")
T = TypeVar("T")
LIST_COLUMNS = ("id, step, task, domain, sample_index, fate, reward, tokens, finish_reason, version_min,"
                " version_max, failed, reason, substr(completion, 1, 160) AS preview")


class BadParameter(UserError):
    """A query parameter that does not parse; `name` says which (the API answers 400 naming it)."""

    def __init__(self, name: str, message: str):
        super().__init__(f"{name}: {message}")
        self.name = name


def check_run_dir(path: str | Path) -> Path:
    p = Path(path)
    if not p.is_dir():
        raise UserError(f"{p}: {'not a directory' if p.exists() else 'no such directory'}")
    if not (p / METRICS).is_file() and not (p / lineage.FILENAME).is_file():
        raise UserError(f"{p}: not a run directory (no {METRICS} or {lineage.FILENAME})")
    return p


class JsonlTail:
    """One JSONL file read incrementally; complete lines only, malformed ones skipped and noted."""

    def __init__(self, path: Path, fold: type | None = None):
        self.path, self.fold_type, self.lock = path, fold, threading.Lock()
        self._reset()

    def _reset(self) -> None:
        self.key, self.offset, self.lines, self.rows, self.bad = None, 0, 0, [], []
        self.fold = self.fold_type() if self.fold_type else None  # each complete row is added to it, once

    def read(self) -> tuple[tuple | None, list[dict]]:
        """(cache key, rows): the key changes exactly when the rows may have."""
        with self.lock:
            try:
                st = self.path.stat()
            except FileNotFoundError:
                self._reset()
                return None, []
            key = (st.st_ino, st.st_size, st.st_mtime_ns)
            if key != self.key:
                if self.key is None or st.st_ino != self.key[0] or st.st_size < self.offset:
                    self._reset()  # replaced or truncated: read it again from the start
                self._advance()
                self.key = key
            return self.key, self.rows[:]  # a copy: later reads append to self.rows

    def _advance(self) -> None:
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            data = f.read()
        done = data[:data.rfind(b"\n") + 1]  # whole lines only: the writer appends each with its newline
        self.offset += len(done)
        for line in done.splitlines():
            self.lines += 1
            if isinstance(row := loads(line, None), dict):
                self.rows.append(row)
                if self.fold is not None:
                    self.fold.add(row)
            elif line.strip():
                self.bad.append(f"{self.path.name} line {self.lines}: not a JSON object (skipped)")


class RunData:
    """Everything the dashboard shows of one run directory, read when asked."""

    def __init__(self, run_dir: str | Path):
        self.dir = check_run_dir(run_dir)
        self.metrics_tail = JsonlTail(self.dir / METRICS, DomainFold)
        self.sandbox_tail = JsonlTail(self.dir / SANDBOX)
        self._cache: dict[str, tuple] = {}  # what is derived from a file's rows, by their cache key

    def run(self) -> JSONObject:
        _, rows = self.metrics_tail.read()
        self.sandbox_tail.read()  # for its warnings
        config = _read_json(self.dir / "config.json")
        run_cfg = config.get("run") if isinstance(config, dict) and isinstance(config.get("run"), dict) else {}
        last = rows[-1] if rows else {}
        finished = (self.dir / "summary.json").is_file()
        return {"name": run_cfg.get("name") or self.dir.name, "run_dir": str(self.dir.resolve()),
                "status": "finished" if finished else "live", "step": last.get("step"),
                "steps": run_cfg.get("steps"), "reward": last.get("reward/mean"),
                "elapsed_s": last.get("elapsed_s"), "has_lineage": (self.dir / lineage.FILENAME).is_file(),
                "has_metrics": (self.dir / METRICS).is_file(),
                "warnings": self.metrics_tail.bad[:20] + self.sandbox_tail.bad[:20],
                "summary": _read_json(self.dir / "summary.json") if finished else None}

    def _derived(self, name: str, fn: Callable[[list[JSONObject]], T], tail: JsonlTail | None = None) -> T:
        key, rows = (tail or self.metrics_tail).read()
        if key is None or self._cache.get(name, (None,))[0] != key:
            self._cache[name] = (key, fn(rows))
        return self._cache[name][1]

    def metrics(self, keys: list[str] | None = None) -> JSONObject:
        """The rows (only `keys`, and step, when given) and per-step utilisation derived from them."""
        rows = self.metrics_tail.read()[1]
        if keys:  # looked up, not filtered: a row holds thousands of keys at hundreds of domains
            rows = [{k: row[k] for k in ("step", *keys) if k in row} for row in rows]
        return {"rows": rows, "utilisation": self._derived("utilisation", utilisation)}

    def domains(self) -> list[JSONObject]:
        def table(_: list) -> list[JSONObject]:
            with self.metrics_tail.lock:  # another request's read may be folding rows in
                return self.metrics_tail.fold.table()
        return self._derived("domains", table)

    def sandbox(self) -> JSONObject:
        return self._derived("sandbox", sandbox_summary, self.sandbox_tail)

    def _query(self, sql: str, args: list | tuple) -> list[JSONObject]:
        """Rows of one read-only query as dicts (none before the store exists); values are ? parameters."""
        if not (self.dir / lineage.FILENAME).is_file():
            return []
        with contextlib.closing(lineage.open_read_only(self.dir)) as db:
            cur = db.execute(sql, args)
            return [dict(zip([d[0] for d in cur.description], r)) for r in cur.fetchall()]

    def traffic(self, read: Callable[..., T], *args: object, empty: T | None = None) -> T | None:
        """`read(db, *args)` on the lineage store (served traffic: `view.traffic`); `empty` before it exists."""
        if not (self.dir / lineage.FILENAME).is_file():
            return empty
        with contextlib.closing(lineage.open_read_only(self.dir)) as db:
            return read(db, *args)

    def samples(self, params: dict[str, str]) -> JSONObject:
        where, args, limit, offset = sample_filters(params)
        page = {"samples": [], "total": 0, "limit": limit, "offset": offset}
        if not (self.dir / lineage.FILENAME).is_file():
            return {**page, "note": f"no lineage store yet ({lineage.FILENAME}): no samples recorded so far"}
        total = self._query(f"SELECT count(*) AS n FROM samples{where}", args)[0]["n"]
        rows = self._query(f"SELECT {LIST_COLUMNS} FROM samples{where} ORDER BY id LIMIT ? OFFSET ?",
                           [*args, limit, offset])
        return {**page, "samples": rows, "total": total}

    def sample(self, sample_id: int) -> JSONObject | None:
        """One sample in full with its tool calls; None when there is no such sample."""
        row = next(iter(self._query("SELECT * FROM samples WHERE id = ?", (sample_id,))), None)
        if row is None:
            return None
        for key, empty in (("versions", "[]"), ("components", "{}"), ("weights", "{}"), ("turns", "[]")):
            row[key] = json.loads(row[key] or empty)  # the JSON columns, decoded as lineage.read_samples does
        row["failed"] = bool(row["failed"])
        calls = lineage.read_tool_calls(self.dir, sample_id)
        for c in calls:
            c["arguments"], c["files"] = loads(c["arguments"], c["arguments"]), loads(c["files"], c["files"])
        return {**row, "tool_calls": calls}

    def staleness(self) -> JSONObject:
        """Samples by version lag and fate. The lag is step minus the oldest policy version among the
        sample's model tokens: the trainer's version equals its step throughout a run."""
        rows = self._query("SELECT step - version_min AS lag, fate, count(*) AS n FROM samples"
                           " WHERE version_min >= 0 GROUP BY 1, 2 ORDER BY 1, 2", ())
        return {"counts": [[r["lag"], r["fate"], r["n"]] for r in rows]}


def sample_filters(params: dict[str, str]) -> tuple[str, list, int, int]:
    """(WHERE clause, its parameters, limit, offset) from the query; a bad value is a BadParameter."""
    columns = {"domain": ("domain = ?", str), "fate": ("fate = ?", str), "reward_min": ("reward >= ?", float),
               "reward_max": ("reward <= ?", float), "step_min": ("step >= ?", int), "step_max": ("step <= ?", int)}
    for name in params.keys() - columns.keys() - {"limit", "offset"}:
        raise BadParameter(name, f"unknown parameter (known: {', '.join([*columns, 'limit', 'offset'])})")
    if params.get("fate") and params["fate"] not in FATES:
        raise BadParameter("fate", f"{params['fate']!r} is not one of {', '.join(FATES)}")
    given = [(name, sql, kind) for name, (sql, kind) in columns.items() if params.get(name, "") != ""]
    args = [number(name, params[name], kind) if kind is not str else params[name] for name, _, kind in given]
    where = " AND ".join(sql for _, sql, _ in given)
    limit = number("limit", params.get("limit") or "50", int, 1, MAX_LIMIT)
    offset = number("offset", params.get("offset") or "0", int, 0)
    return (f" WHERE {where}" if where else ""), args, limit, offset


def number(name: str, text: str, kind: type, low: int = -2**63, high: int = 2**63 - 1) -> int | float:
    """`text` as `kind`, finite and within [low, high] (by default, what an SQLite integer holds)."""
    try:
        value = kind(text)
    except ValueError:
        raise BadParameter(name, f"{text!r} is not {'an integer' if kind is int else 'a number'}") from None
    if not math.isfinite(value):
        raise BadParameter(name, f"{text!r} is not a finite number")
    if not low <= value <= high:
        raise BadParameter(name, f"must be between {low:g} and {high:g}, not {value}")
    return value


def utilisation(rows: list[dict]) -> dict[str, list]:
    """Per step, busy seconds over its wall time (elapsed_s since the previous row; None for the first):
    the trainer computing (seconds/step less the wait) and idle (waiting for rollouts), the engine
    generating, the sandbox running tools (these two overlap steps, across workers: may exceed 1)."""
    out: dict[str, list] = {k: [] for k in ("step", "wall_s", *UTILISATION)}
    prev: dict = {}
    for row in rows:
        wall = _diff(row, prev, "elapsed_s")
        wall = wall if wall is not None and wall > 0 else None
        step, wait, tools = (row.get(f"seconds/{k}") for k in ("step", "wait_rollout", "rollout_tools"))
        busy = (step - wait if _nums(step, wait) else None, wait if _nums(wait) else None,
                _diff(row, prev, "seconds/engine_busy"),  # counted since the workers started: the step's part
                tools if _nums(tools) else None)
        ratios = [v / wall if wall is not None and v is not None else None for v in busy]
        for k, v in zip(out, (row.get("step"), wall, *ratios)):
            out[k].append(v)
        prev = row
    return out


def _nums(*values: object) -> bool:
    return all(isinstance(v, (int, float)) for v in values)


def _diff(row: dict, prev: dict, key: str) -> float | None:
    a, b = row.get(key), prev.get(key)
    return a - b if _nums(a, b) else None


class DomainFold:
    """Each domain's latest values and reward over steps, folded in one metrics row at a time, so a
    live run's poll costs the rows appended since the last one, not the whole history."""

    def __init__(self) -> None:
        self.latest: dict[str, JSONObject] = {}
        self.series: dict[str, list] = {}

    def add(self, row: dict) -> None:
        for key, value in row.items():
            head, _, rest = key.partition("/")
            name, _, domain = rest.partition("/")
            if head == "reward" and name == "domain" and domain:
                field = "reward"
                self.series.setdefault(domain, []).append([row.get("step"), value])
            elif head == "scheduler" and name in SCHEDULER_FIELDS and domain:
                field = name
            elif head == "outcome" and rest:
                field, domain = "pass_rate", rest
            else:
                continue
            self.latest.setdefault(domain, {})[field] = value

    def table(self) -> list[JSONObject]:
        """One entry per domain, by name; its reward series thinned for a sparkline."""
        fields = ("reward", "pass_rate", *SCHEDULER_FIELDS)
        return [{"domain": d, **{f: v.get(f) for f in fields}, "rewards": _thin(self.series.get(d, []))}
                for d, v in sorted(self.latest.items())]


def _thin(points: list) -> list:
    stride = math.ceil(len(points) / SPARK_POINTS)
    return points if stride <= 1 else points[::stride] + ([points[-1]] if (len(points) - 1) % stride else [])


def sandbox_summary(rows: list[dict]) -> JSONObject:
    """Counts by reason and start (warm/cold), and latency quantiles per domain, in seconds."""
    seconds: dict[str, dict[str, list[float]]] = {}
    for r in rows:
        per = seconds.setdefault(str(r.get("domain") or "(none)"), {"wall": [], "total": []})
        for k in ("wall", "total"):
            if _nums(r.get(f"{k}_s")):
                per[k].append(r[f"{k}_s"])
    latency = [{"domain": d, "count": len(s["wall"]), **{f"{k}_p{round(q * 100)}": quantile(s[k], q)
               for k in ("wall", "total") for q in (0.5, 0.99)}} for d, s in sorted(seconds.items())]
    return {"executions": len(rows), "reasons": dict(Counter(str(r.get("reason")) for r in rows).most_common()),
            "starts": dict(Counter(str(r.get("start")) for r in rows).most_common()), "latency": latency}


def quantile(values: list[float], q: float) -> float | None:
    """The nearest-rank quantile (an observed value, not an interpolation)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))] if ordered else None


def _read_json(path: Path) -> JSON:  # None when absent or still being written: the caller shows what it has
    return loads(path.read_bytes(), None) if path.is_file() else None


def loads(text: JSON | bytes, default: T) -> JSON | T:  # not str or bytes, or not JSON: default
    try:
        return json.loads(text)
    except (ValueError, TypeError):
        return default
