"""The per-execution log: one JSON line per sandbox run, appended to `<run dir>/sandbox.jsonl`.

Each line records what ran (the program name and the size of the request, never its files or
full source), how the run ended and what it used, so slow or failing sandboxes can be found
after the fact. Thread-safe; a write failure is reported once on stderr and never fails a run
or the backend's close. It does not aggregate: metrics and dashboards read the file.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path

from tempering.records import ExecResult
from tempering.sandbox.request import ExecRequest

FILENAME = "sandbox.jsonl"


class ExecLog:
    def __init__(self, directory: str | Path) -> None:
        self.path = Path(directory) / FILENAME
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "a", buffering=1)
        self._lock = threading.Lock()
        self._warned = False

    def write(self, job: int, backend: str, req: ExecRequest, result: ExecResult, **extra) -> None:
        line = json.dumps(record(job, backend, req, result, **extra), separators=(",", ":"))
        with self._lock:
            if self._file.closed:
                return
            try:
                self._file.write(line + "\n")
            except OSError as e:
                self._warn(e)

    def close(self) -> None:
        with self._lock:
            try:
                self._file.close()  # closed even when it raises: a line it could not write is lost
            except OSError as e:
                self._warn(e)

    def _warn(self, e: OSError) -> None:
        if not self._warned:
            print(f"tempering sandbox: cannot write {self.path}: {e}", file=sys.stderr)
            self._warned = True


def record(job: int, backend: str, req: ExecRequest, result: ExecResult, **extra) -> dict:
    return {
        "time": round(time.time(), 3), "job": job, "backend": backend, "start": result.start,
        "program": req.command[0][:200], "argc": len(req.command),
        "request_bytes": sum(len(v) for v in req.files.values()) + len(req.stdin),
        "limits": {"time_s": req.time_limit_s, "memory_mb": req.memory_mb, "pids": req.pids,
                   "output_bytes": req.output_limit_bytes},
        "reason": result.reason.value, "exit_code": result.exit_code,
        "wall_s": round(result.wall_s, 6), "cpu_s": round(result.cpu_s, 6),
        "peak_memory_mb": round(result.peak_memory_mb, 3),
        "stdout_bytes": len(result.stdout), "stderr_bytes": len(result.stderr),
        "truncated": result.truncated, "files": sorted(result.files), "error": result.error[:500],
        **extra,
    }
