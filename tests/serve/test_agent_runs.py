"""POST /v1/agent/runs: whole episodes played server-side by scripted policies (real decoders whose
weights make them say given turns, in the demo's compact tool format): the shipped terminal task
fix-median-even fixed in a sandbox session and verified by its hidden tests (reward 1), a files
domain task, bad requests, and a client that goes away mid-run: the command it started is
killed and no sandbox process is left, judged from the host."""

from __future__ import annotations

import http.client
import json
import os
import socket
import urllib.request

import pytest
from serve_helpers import host_cmdlines_containing, serving, wait_until

from tempering.config import SandboxConfig, ServeConfig
from tempering.models.scripted import scripted_policy
from tempering.oracle import draw
from tempering.sandbox.toolchain import MANIFEST, default_dir
from tempering.serve.traffic import read_served
from tempering.tasks import get_domain

needs_sandbox = pytest.mark.skipif(not os.path.exists("/usr/bin/bwrap") or not (default_dir() / MANIFEST).is_file(),
                                   reason="needs bubblewrap and the toolchain (scripts/setup.sh)")

# The instruction (the prompt: no chat template) ends with a newline; each observation is one piece.
FIX = ("$edit stats.py\n    return ordered[middle]\n    if len(ordered) % 2:\n        return ordered[middle]\n"
       "    return (ordered[middle - 1] + ordered[middle]) / 2")
CHECK = "$run python3 -c 'import stats; print(stats.median([5, 1, 3, 2]))'"
FIXER = [["\n", FIX], [">edited stats.py\n", CHECK], [">2.5\n[exit code 0]\n", "$submit"]]


def post(srv, body: dict, stream: bool = False, headers: dict | None = None):
    conn = http.client.HTTPConnection("127.0.0.1", srv.server_address[1], timeout=120)
    conn.request("POST", "/v1/agent/runs", body=json.dumps({**body, "stream": stream}),
                 headers={"Content-Type": "application/json", **(headers or {})})
    return conn, conn.getresponse()


def events(resp) -> list[dict]:
    out = []
    for line in resp.read().decode().split("\n"):
        if line.startswith("data: {"):
            out.append(json.loads(line[6:]))
    return out


@pytest.fixture(scope="module")
def fixer(tmp_path_factory):
    model, tok = scripted_policy(FIXER)
    log = tmp_path_factory.mktemp("served")
    with serving(model, tok, cfg=ServeConfig(tool_parser="compact", log_dir=str(log)), max_seq_len=4096) as srv:
        yield srv, log


@needs_sandbox
def test_an_agent_run_fixes_a_shipped_terminal_task_and_its_hidden_tests_pass(fixer):
    srv, log = fixer
    conn, resp = post(srv, {"model": "tiny", "task": {"terminal": "fix-median-even"}, "temperature": 0})
    result = json.loads(resp.read())
    conn.close()
    assert resp.status == 200 and result["object"] == "agent.run" and result["status"] == "completed", result
    assert result["reward"]["total"] == 1.0 and not result["reward"]["failed"], result["reward"]
    assert [t["tool_calls"][0]["name"] for t in result["turns"]] == ["edit", "run", "submit"]
    run = result["turns"][1]["tool_calls"][0]
    assert run["output"] == "2.5\n[exit code 0]" and run["exec"]["reason"] == "ok"  # it ran in the sandbox
    assert result["finish_reason"] == "stop" and result["task"]["domain"] == "terminal"
    assert resp.getheader("X-Tempering-Version") == "0" and result["system_fingerprint"] == "tempering-v0"
    # on record, with the sandbox result of its command
    srv.traffic.flush()
    (row,) = [r for r in read_served(log) if r["kind"] == "agent_run" and r["status"] == 200][-1:]
    assert row["reward"] == 1.0 and row["tenant"] == "default" and row["task"] == result["task"]["id"]
    assert [c["name"] for c in row["tool_calls"]] == ["edit", "run", "submit"]
    assert row["tool_calls"][1]["exec_reason"] == "ok" and row["tool_calls"][1]["stdout"] == "2.5\n"
    # Prometheus: each completed run's one command, an "ok" sandbox outcome of its tenant
    runs = [r for r in read_served(log) if r["kind"] == "agent_run" and r["status"] == 200]
    assert f'tempering_serve_sandbox_executions_total{{reason="ok",tenant="default"}} {len(runs)}.0' in _metrics(srv)
    assert f'tempering_serve_agent_runs_total{{outcome="completed",tenant="default"}} {len(runs)}.0' in _metrics(srv)


@needs_sandbox
def test_a_streamed_run_sends_its_turns_and_results_as_they_happen(fixer):
    srv, _ = fixer
    conn, resp = post(srv, {"task": {"terminal": "fix-median-even"}}, stream=True)
    got = events(resp)
    conn.close()
    assert resp.getheader("Content-Type") == "text/event-stream"
    assert [e["type"] for e in got] == ["run.started", "turn", "tool_result", "turn", "tool_result", "turn",
                                        "tool_result", "run.completed"]
    assert got[1]["content"] == FIX and got[2]["name"] == "edit" and got[2]["output"] == "edited stats.py"
    assert got[4]["exec"]["reason"] == "ok" and got[-1]["reward"]["total"] == 1.0


def test_a_domain_task_runs_without_a_sandbox():
    (task,) = draw(get_domain("files"), 1, 3)  # "sort @e=": the digits are in file e
    name = task.prompt.split("@")[1].rstrip("=")
    digits = dict(task.environment.files)[name]
    model, tok = scripted_policy([["=", f"$read {name}"], [f">{digits}\n", task.answer]])
    with serving(model, tok, cfg=ServeConfig(tool_parser="compact")) as srv:
        conn, resp = post(srv, {"task": {"domain": "files", "seed": 3}})
        result = json.loads(resp.read())
        conn.close()
        assert result["reward"]["components"]["outcome"] == 1.0 and result["final"] == task.answer
        assert result["turns"][0]["tool_calls"][0]["output"] == digits and srv.agents._node is None


@pytest.mark.parametrize("body, status, words", [
    ({"task": {"terminal": "no-such-task"}}, 404, "no terminal task named"),
    ({"task": {"domain": "nope", "seed": 1}}, 404, "unknown task domain"),
    ({"task": {"folder": "/etc"}}, 403, "serve.task_dirs"),
    ({"task": {"terminal": "fix-median-even"}, "max_turns": 99}, 400, "max_turns"),
    ({"task": "fix-median-even"}, 400, "task must be one of"),
    ({"task": {"domain": "files"}, "tools": []}, 400, "unsupported fields"),
    ({"task": {"domain": "files"}, "model": "other"}, 404, "does not exist"),
])
def test_bad_runs_are_4xx(body, status, words):
    model, tok = scripted_policy([])
    with serving(model, tok) as srv:
        conn, resp = post(srv, body)
        err = json.loads(resp.read())["error"]
        conn.close()
        assert resp.status == status and words in err["message"], err


@needs_sandbox
def test_a_client_that_goes_away_mid_run_leaves_no_sandbox_process(tmp_path):
    mark = f"agent-left-{os.getpid()}"
    model, tok = scripted_policy([["\n", f"$run exec -a {mark} sleep 300"]])
    # the command's own limit (120 s) is far off: only the cancel can end it early
    with serving(model, tok, cfg=ServeConfig(tool_parser="compact", log_dir=str(tmp_path)), max_seq_len=4096) as srv:
        srv.agents.sandbox_cfg = SandboxConfig(workers=2, time_limit_s=120)
        body = json.dumps({"task": {"terminal": "fix-median-even"}, "stream": True}).encode()
        sock = socket.create_connection(("127.0.0.1", srv.server_address[1]), timeout=120)
        sock.sendall(b"POST /v1/agent/runs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        received = b""
        while b"run.started" not in received:  # the run is under way
            received += sock.recv(4096)
        assert wait_until(lambda: host_cmdlines_containing(mark), 120)  # the model's command runs
        sock.close()
        assert wait_until(lambda: not host_cmdlines_containing(mark), 60)
        staging = str(srv.agents._node.backend._staging.root)
        assert wait_until(lambda: srv.traffic is not None and _flushed_rows(srv, tmp_path), 60)
        (row,) = [r for r in read_served(tmp_path) if r["kind"] == "agent_run"]
        assert row["status"] == 499 and row["finish_reason"] == "abort" and row["reward"] is None
        assert 'tempering_serve_agent_runs_total{outcome="cancelled",tenant="default"} 1.0' in _metrics(srv)
    # the server closed its sandbox: none of its processes or its staging folder remain
    assert wait_until(lambda: not host_cmdlines_containing(staging), 30) and not os.path.exists(staging)


def _metrics(srv) -> str:
    return urllib.request.urlopen(f"http://127.0.0.1:{srv.server_address[1]}/metrics", timeout=30).read().decode()


def _flushed_rows(srv, log) -> bool:
    srv.traffic.flush()
    return any(r["kind"] == "agent_run" for r in read_served(log))
