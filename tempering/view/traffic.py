"""Served traffic for `tempering view`: what `tempering serve` recorded (`serve.traffic`) in the
lineage store of its `serve.log_dir`, read-only, as JSON-able dicts.

`summary`: counts per tenant over everything recorded (requests, errors, rate-limited ones,
agent runs and their mean reward, tokens), latency and time-to-first-token quantiles over each
tenant's latest `WINDOW` answered requests, and requests and mean latency per `BUCKET_S` seconds
over the last hour of traffic, per tenant. `requests`: a page of requests, newest first,
filtered by tenant, kind and status. `request`: one in full with its tool calls. A store
without served tables has no traffic (`served` false). It neither writes nor serves HTTP.
"""

from __future__ import annotations

import sqlite3

from tempering.jsonvalue import JSONObject
from tempering.serve.traffic import KINDS, has_served
from tempering.view.data import MAX_LIMIT, BadParameter, loads, number, quantile

WINDOW = 10_000  # latest answered requests per tenant its quantiles are taken over
BUCKET_S = 10  # seconds per point of the timeline
LIST_COLUMNS = ("id, time, tenant, kind, status, version, latency_s, ttft_s, prompt_tokens, completion_tokens,"
                " finish_reason, task, reward, substr(completion, 1, 120) AS preview")


def summary(db: sqlite3.Connection) -> JSONObject:
    if not has_served(db):
        return {"served": False, "tenants": [], "timeline": []}
    counts = db.execute(
        "SELECT tenant, count(*), sum(status >= 400 AND status != 429), sum(status = 429), sum(kind = 'agent_run'),"
        " avg(CASE WHEN kind = 'agent_run' THEN reward END), sum(prompt_tokens), sum(completion_tokens)"
        " FROM served GROUP BY tenant ORDER BY tenant").fetchall()
    tenants = []
    for name, n, errors, limited, runs, reward, prompt, completion in counts:
        latency = [r[0] for r in db.execute("SELECT latency_s FROM served WHERE tenant = ? AND status = 200"
                                            " ORDER BY id DESC LIMIT ?", (name, WINDOW))]
        ttft = [r[0] for r in db.execute("SELECT ttft_s FROM served WHERE tenant = ? AND status = 200 AND ttft_s"
                                         " IS NOT NULL ORDER BY id DESC LIMIT ?", (name, WINDOW))]
        tenants.append({"tenant": name, "requests": n, "errors": errors or 0, "rate_limited": limited or 0,
                        "agent_runs": runs or 0, "mean_reward": reward, "prompt_tokens": prompt or 0,
                        "completion_tokens": completion or 0, "latency_p50": quantile(latency, 0.5),
                        "latency_p99": quantile(latency, 0.99), "ttft_p50": quantile(ttft, 0.5)})
    end = db.execute("SELECT max(time) FROM served").fetchone()[0] or 0.0
    timeline = db.execute(
        f"SELECT CAST(time / {BUCKET_S} AS INTEGER) * {BUCKET_S} AS t, tenant, count(*), avg(latency_s) FROM served"
        " WHERE time >= ? GROUP BY 1, 2 ORDER BY 1, 2", (end - 3600,)).fetchall()
    return {"served": True, "requests": sum(t["requests"] for t in tenants), "tenants": tenants,
            "timeline": [list(r) for r in timeline], "bucket_s": BUCKET_S}


def requests(db: sqlite3.Connection, params: dict[str, str]) -> JSONObject:
    where, args, limit, offset = _filters(params)
    page = {"requests": [], "total": 0, "limit": limit, "offset": offset}
    if not has_served(db):
        return page
    total = db.execute(f"SELECT count(*) FROM served{where}", args).fetchone()[0]
    cur = db.execute(f"SELECT {LIST_COLUMNS} FROM served{where} ORDER BY id DESC LIMIT ? OFFSET ?",
                     [*args, limit, offset])
    names = [d[0] for d in cur.description]
    return {**page, "requests": [dict(zip(names, r)) for r in cur.fetchall()], "total": total}


def request(db: sqlite3.Connection, served_id: int) -> JSONObject | None:
    if not has_served(db):
        return None
    cur = db.execute("SELECT * FROM served WHERE id = ?", (served_id,))
    row = cur.fetchone()
    if row is None:
        return None
    out = dict(zip([d[0] for d in cur.description], row))
    cur = db.execute("SELECT * FROM served_tool_calls WHERE served_id = ? ORDER BY turn, position", (served_id,))
    names = [d[0] for d in cur.description]
    calls = [dict(zip(names, r)) for r in cur.fetchall()]
    for c in calls:
        c["arguments"], c["files"] = loads(c["arguments"], c["arguments"]), loads(c["files"], c["files"])
    return {**out, "tool_calls": calls}


def _filters(params: dict[str, str]) -> tuple[str, list, int, int]:
    known = {"tenant", "kind", "status", "limit", "offset"}
    for name in params.keys() - known:
        raise BadParameter(name, f"unknown parameter (known: {', '.join(sorted(known))})")
    clauses, args = [], []
    if params.get("tenant"):
        clauses.append("tenant = ?")
        args.append(params["tenant"])
    if params.get("kind"):
        if params["kind"] not in KINDS:
            raise BadParameter("kind", f"{params['kind']!r} is not one of {', '.join(KINDS)}")
        clauses.append("kind = ?")
        args.append(params["kind"])
    if params.get("status"):
        clauses.append("status = ?")
        args.append(number("status", params["status"], int, 100, 599))
    limit = number("limit", params.get("limit") or "50", int, 1, MAX_LIMIT)
    offset = number("offset", params.get("offset") or "0", int, 0)
    return (f" WHERE {' AND '.join(clauses)}" if clauses else ""), args, limit, offset
