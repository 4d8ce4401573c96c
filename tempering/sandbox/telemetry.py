"""The per-execution log: one JSON line per sandbox run, appended to `<run dir>/sandbox.jsonl`.

Each line records what ran (the program name and the size of the request, never its files or
full source), how the run ended and what it used, so slow or failing sandboxes can be found
after the fact; who asked for it (the request's `ExecTag`: sample, turn, batch, evaluation
label) so it can be joined to its sample; and the process that ran it (pid and name). Job ids
are unique across every process appending to the same file: a random token per process and a
counter. `rewind` drops the rows a resumed run will redo. Thread-safe; a write failure is
reported once on stderr and never fails a run or the backend's close. It does not aggregate:
metrics and dashboards read the file.
"""

from __future__ import annotations

import itertools
import json
import multiprocessing
import os
import re
import secrets
import sys
import threading
import time
from pathlib import Path

from tempering.records import ExecResult
from tempering.sandbox.request import ExecRequest

FILENAME = "sandbox.jsonl"
_ids_lock = threading.Lock()
_ids: tuple[int, str, itertools.count] | None = None  # (pid, token, counter) of this process


def next_job_id() -> str:
    """"<token>-<n>": the token is drawn once per process (again after a fork), so two
    processes writing one file never repeat an id, nor does a later run that reuses a pid."""
    global _ids
    with _ids_lock:
        if _ids is None or _ids[0] != os.getpid():
            _ids = (os.getpid(), secrets.token_hex(4), itertools.count())
        return f"{_ids[1]}-{next(_ids[2])}"


class ExecLog:
    def __init__(self, directory: str | Path) -> None:
        self.path = Path(directory) / FILENAME
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "a", buffering=1)
        self._lock = threading.Lock()
        self._warned = False

    def write(self, backend: str, req: ExecRequest, result: ExecResult, **extra) -> None:
        line = json.dumps(record(next_job_id(), backend, req, result, **extra), separators=(",", ":"))
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


def record(job: str, backend: str, req: ExecRequest, result: ExecResult, **extra) -> dict:
    tag = req.tag
    return {
        "time": round(time.time(), 3), "job": job, "backend": backend, "start": result.start,
        "pid": os.getpid(), "process": multiprocessing.current_process().name,
        "sample": tag.sample, "turn": tag.turn, "batch": tag.batch, "eval": tag.eval, "domain": tag.domain,
        "tenant": tag.tenant,
        "program": req.command[0][:200], "argc": len(req.command),
        "request_bytes": sum(len(v) for v in req.files.values()) + len(req.stdin),
        "mounts": {m.path: len(m.content.archive) for m in req.mounts},
        "limits": {"time_s": req.time_limit_s, "memory_mb": req.memory_mb, "pids": req.pids,
                   "output_bytes": req.output_limit_bytes},
        "reason": result.reason.value, "exit_code": result.exit_code,
        "wall_s": round(result.wall_s, 6), "cpu_s": round(result.cpu_s, 6),
        "peak_memory_mb": round(result.peak_memory_mb, 3),
        "stdout_bytes": len(result.stdout), "stderr_bytes": len(result.stderr),
        "truncated": result.truncated, "lingering": result.lingering, "files": sorted(result.files),
        "archives": {path: len(data) for path, data in result.archives.items()}, "error": result.error[:500],
        **extra,
    }


_STEP_LABEL = re.compile(r"step-(\d+)")


def rewind(run_dir: str | Path, step: int) -> None:
    """Make `<run_dir>/sandbox.jsonl` match a checkpoint at `step`, for a resumed run: drop the
    rows of rollout batches that will be redone (batch >= step) and of the evaluations that
    will be (the final one, and those labelled after `step`). Rows without a tag stay."""
    from tempering.metrics import rewind_jsonl  # the one JSONL rewriter (resume uses it for every log)

    def keep(row: dict) -> bool:
        batch, label = row.get("batch"), row.get("eval") or ""
        if isinstance(batch, int) and batch >= step:
            return False
        if label == "final":
            return False
        m = _STEP_LABEL.fullmatch(label)
        return not (m and int(m.group(1)) > step)

    rewind_jsonl(Path(run_dir) / FILENAME, keep)
