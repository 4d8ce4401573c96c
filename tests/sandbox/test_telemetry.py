"""sandbox.jsonl: rows joined to samples, job ids unique across processes, and rewinding on resume
(a hand-written log, rewound, compared with the rows that must stay)."""

from __future__ import annotations

import json
import os

from tempering.records import ExecReason, ExecResult
from tempering.sandbox import ExecRequest, ExecTag
from tempering.sandbox.telemetry import FILENAME, ExecLog, next_job_id, rewind


def test_rows_carry_the_tag_and_the_process(tmp_path):
    log = ExecLog(tmp_path)
    tag = ExecTag(sample="t/0", turn=3, batch=12, eval="")
    log.write("bwrap", ExecRequest(command=("true",), tag=tag), ExecResult(reason=ExecReason.OK, exit_code=0))
    log.write("bwrap", ExecRequest(command=("true",)), ExecResult(reason=ExecReason.OK, exit_code=0))
    log.close()
    a, b = (json.loads(line) for line in (tmp_path / FILENAME).read_text().splitlines())
    assert (a["sample"], a["turn"], a["batch"], a["eval"]) == ("t/0", 3, 12, "")
    assert (b["sample"], b["turn"], b["batch"], b["eval"]) == ("", -1, None, "")
    assert a["pid"] == b["pid"] == os.getpid() and a["process"] == "MainProcess" and a["job"] != b["job"]


def test_job_ids_differ_across_processes():
    """Two processes writing one file (the trainer's sandbox and the rollout worker's) never
    repeat an id: a forked child draws its own token, even though it inherits the parent's."""
    mine = next_job_id()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.write(write, next_job_id().encode())
        os._exit(0)
    os.close(write)
    theirs = os.read(read, 100).decode()
    os.waitpid(pid, 0)
    os.close(read)
    assert mine.split("-")[0] != theirs.split("-")[0], (mine, theirs)
    assert next_job_id().split("-")[0] == mine.split("-")[0]  # one token per process


def test_rewind_drops_what_a_resumed_run_redoes(tmp_path):
    rows = [{"job": "a-0", "batch": 0}, {"job": "a-1", "batch": 1}, {"job": "a-2", "batch": 2},
            {"job": "a-3", "batch": 3}, {"job": "a-4", "batch": None, "eval": "baseline"},
            {"job": "a-5", "batch": None, "eval": "step-000002"}, {"job": "a-6", "batch": None, "eval": "step-000004"},
            {"job": "a-7", "batch": None, "eval": "final"}, {"job": "a-8"}]
    (tmp_path / FILENAME).write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"job": "torn')
    rewind(tmp_path, 2)  # the checkpoint after step 2: batches 0 and 1 were trained on
    kept = [json.loads(line)["job"] for line in (tmp_path / FILENAME).read_text().splitlines()]
    assert kept == ["a-0", "a-1", "a-4", "a-5", "a-8"]
