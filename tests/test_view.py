"""`tempering view`: the JSON API over a run directory built here (metrics.jsonl, a real lineage
store, sandbox.jsonl), served by the real server on a free port; clear errors for a missing,
empty or half-written run directory. The page itself is tested in the browser tests."""

import json
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tempering import cli
from tempering.errors import UserError
from tempering.lineage import LineageStore
from tempering.records import ExecReason, ExecResult, Group, Reward, Task, ToolCall, Trajectory, Turn
from tempering.view.data import RunData
from tempering.view.server import start_view

ROOT = Path(__file__).parent.parent
DOMAINS = {  # latest values written for each domain; "beta/x" checks that a domain may contain '/'
    "alpha": {"reward": 0.75, "pass_rate": 0.5, "share_target": 0.6, "share": 0.55, "weight": 2.0, "level": 1.0},
    "beta/x": {"reward": 0.25, "pass_rate": 0.0, "share_target": 0.4, "share": 0.45, "weight": 1.0, "level": 0.0},
}
KEYS = {"reward": "reward/domain/{}", "pass_rate": "outcome/{}", "share_target": "scheduler/share_target/{}",
        "share": "scheduler/share/{}", "weight": "scheduler/weight/{}", "level": "scheduler/level/{}"}


def metrics_rows() -> list[dict]:
    """Three steps; the earlier ones hold other values, the last one DOMAINS; beta/x is absent at step 2."""
    rows = []
    timings = ((1, 10.0, 1.0, 0.2, 1.0), (2, 12.0, 1.5, 0.5, 2.0), (3, 16.0, 3.0, 1.0, 4.0))
    for step, elapsed, step_s, wait, busy in timings:
        row = {"step": step, "elapsed_s": elapsed, "reward/mean": step / 10, "tokens_per_s": 100.0 * step,
               "seconds/step": step_s, "seconds/wait_rollout": wait, "seconds/engine_busy": busy,
               "seconds/rollout_tools": 0.4}
        for d, values in DOMAINS.items():
            if step == 2 and d == "beta/x":
                continue
            for field, key in KEYS.items():
                row[key.format(d)] = values[field] if step == 3 else -1.0
        rows.append(row)
    return rows


def group(task: str, domain: str, rewards: list[Reward], tool: bool = False) -> Group:
    """A group of len(rewards) samples; sample 0 made one sandboxed tool call when `tool`."""
    result = ExecResult(ExecReason.NONZERO_EXIT, 3, stdout="so", stderr="se", wall_s=0.5, cpu_s=0.25,
                        peak_memory_mb=7.5, start="cold")
    call = ToolCall("run", {"cmd": "ls"}, output="exit 3", result=result)
    trajectories = []
    for i in range(len(rewards)):
        episode = tool and i == 0
        turns = [Turn("assistant", 0, 2, (call,)), Turn("tool", 2, 3), Turn("assistant", 3, 4)] if episode else []
        trajectories.append(Trajectory(task, domain, i, [1], [5, 5, 5, 5], [0.0] * 4, [1, 1, 0, 1],
                                       [0, 1, -1, 1], f"{task}-{i}", "stop", turns))
    return Group(Task(task, domain, f"prompt of {task}"), trajectories, rewards)


def write_lineage(run_dir: Path) -> None:
    """Samples 1..4: (step, domain, fate, reward) = (0, alpha, trained, 1.0) with a tool call,
    (0, alpha, uniform, 0.0), (1, beta/x, stale, 0.5), (1, beta/x, failed, 0.0)."""
    store = LineageStore(run_dir)
    a = group("ta", "alpha", [Reward({"outcome": 1.0, "format": 0.5}, {"outcome": 1.0, "format": 0.0}, 1.0),
                              Reward({"outcome": 0.0}, {"outcome": 1.0}, 0.0)], tool=True)
    b = group("tb", "beta/x", [Reward({"outcome": 0.5}, {"outcome": 1.0}, 0.5),
                               Reward({}, {}, 0.0, failed=True, reason="verifier crashed")])
    for g, i, fate, step in ((a, 0, "trained", 0), (a, 1, "uniform", 0), (b, 0, "stale", 1), (b, 1, "failed", 1)):
        store.record(g, i, fate, step)
    store.close()


def write_run(run_dir: Path, lineage: bool = True) -> Path:
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in metrics_rows()))
    sandbox = [{"domain": "alpha", "reason": "ok", "wall_s": w, "total_s": w + 0.1, "start": "warm"}
               for w in (1, 2, 3, 4)]
    sandbox.append({"domain": "beta/x", "reason": "timeout", "wall_s": 5.0, "total_s": 5.5, "start": "cold"})
    (run_dir / "sandbox.jsonl").write_text("".join(json.dumps(r) + "\n" for r in sandbox))
    (run_dir / "config.json").write_text(json.dumps({"run": {"name": "unit", "steps": 10}}))
    if lineage:
        write_lineage(run_dir)
    return run_dir


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    server, thread, url = start_view(write_run(tmp_path_factory.mktemp("run")), port=0)
    yield url
    server.shutdown()
    server.server_close()


def get(url: str) -> tuple[int, object]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_domains_are_exactly_those_written_with_their_latest_values(served):
    status, domains = get(served + "api/domains")
    assert status == 200
    assert {d["domain"]: {k: d[k] for k in KEYS} for d in domains} == DOMAINS
    sparks = {d["domain"]: d["rewards"] for d in domains}
    assert sparks == {"alpha": [[1, -1.0], [2, -1.0], [3, 0.75]], "beta/x": [[1, -1.0], [3, 0.25]]}


def test_run_says_live_without_summary_and_gives_the_latest_step(served):
    status, run = get(served + "api/run")
    assert status == 200
    assert (run["name"], run["status"], run["step"], run["steps"], run["reward"]) == ("unit", "live", 3, 10, 0.3)
    assert run["has_lineage"] and run["warnings"] == []


def test_utilisation_is_busy_seconds_over_the_steps_wall_time(served):
    status, m = get(served + "api/metrics?keys=reward/mean")
    assert status == 200 and m["rows"] == [{"step": s, "reward/mean": s / 10} for s in (1, 2, 3)]
    u = m["utilisation"]
    assert u["wall_s"] == [None, 2.0, 4.0]  # elapsed_s since the previous step; none for the first
    assert u["trainer_busy"] == [None, 0.5, 0.5] and u["trainer_idle"] == [None, 0.25, 0.25]
    assert u["engine_busy"] == [None, 0.5, 0.5] and u["sandbox_busy"] == [None, 0.2, 0.1]


@pytest.mark.parametrize("query, ids, total", [
    ("", [1, 2, 3, 4], 4),
    ("domain=alpha", [1, 2], 2),
    ("domain=beta/x&fate=failed", [4], 1),
    ("fate=stale", [3], 1),
    ("reward_min=0.5", [1, 3], 2),
    ("reward_min=0.1&reward_max=0.9", [3], 1),
    ("step_min=1&step_max=1", [3, 4], 2),
    ("domain=nope", [], 0),
    ("limit=2&offset=1", [2, 3], 4),
])
def test_samples_filter_server_side(served, query, ids, total):
    status, page = get(served + "api/samples?" + query)
    assert status == 200
    assert [s["id"] for s in page["samples"]] == ids and page["total"] == total


def test_a_sample_comes_with_its_tool_calls_and_reward_breakdown(served):
    status, s = get(served + "api/sample/1")
    assert status == 200
    assert (s["domain"], s["fate"], s["reward"], s["prompt"], s["completion"]) == ("alpha", "trained", 1.0,
                                                                                      "prompt of ta", "ta-0")
    assert s["components"] == {"outcome": 1.0, "format": 0.5} and s["weights"] == {"outcome": 1.0, "format": 0.0}
    assert s["turns"] == [["assistant", 0, 2], ["tool", 2, 3], ["assistant", 3, 4]]
    [call] = s["tool_calls"]
    assert (call["name"], call["arguments"], call["exec_reason"], call["exit_code"]) == ("run", {"cmd": "ls"},
                                                                                       "nonzero_exit", 3)
    assert (call["stdout"], call["stderr"], call["wall_s"], call["cpu_s"], call["peak_memory_mb"]) == ("so", "se", 0.5,
                                                                                                       0.25, 7.5)
    status, s = get(served + "api/sample/4")
    assert (s["failed"], s["reason"], s["tool_calls"]) == (True, "verifier crashed", [])


def test_staleness_and_sandbox_summaries(served):
    _, stale = get(served + "api/staleness")  # step - oldest model-token version (0 for every sample)
    assert stale["counts"] == [[0, "trained", 1], [0, "uniform", 1], [1, "failed", 1], [1, "stale", 1]]
    _, sandbox = get(served + "api/sandbox")
    assert sandbox["reasons"] == {"ok": 4, "timeout": 1} and sandbox["executions"] == 5
    alpha, beta = sandbox["latency"]
    assert (alpha["domain"], alpha["count"], alpha["wall_p50"], alpha["wall_p99"]) == ("alpha", 4, 2, 4)
    assert (beta["domain"], beta["wall_p50"], beta["total_p99"]) == ("beta/x", 5.0, 5.5)


@pytest.mark.parametrize("query, name", [
    ("reward_min=abc", "reward_min"), ("step_max=1.5", "step_max"), ("limit=0", "limit"), ("offset=-1", "offset"),
    ("fate=bogus", "fate"), ("reward_max=nan", "reward_max"), ("colour=red", "colour"),
    ("step_min=99999999999999999999", "step_min"),  # past what SQLite's integers hold
])
def test_a_bad_parameter_is_400_naming_it(served, query, name):
    status, body = get(served + "api/samples?" + query)
    assert status == 400 and body["parameter"] == name and body["error"].startswith(f"{name}:")


def test_unknown_sample_or_path_is_404_and_a_bad_id_400(served):
    assert get(served + "api/sample/999")[0] == 404
    assert get(served + "api/nothing")[0] == 404
    assert get(served + "nothing")[0] == 404
    for bad in ("abc", "99999999999999999999"):
        status, body = get(served + "api/sample/" + bad)
        assert status == 400 and body["parameter"] == "id"


def test_the_page_and_plotly_are_served(served):
    with urllib.request.urlopen(served, timeout=10) as r:
        page = r.read().decode()
    for marker in ('id="domains"', 'id="domain-search"', 'id="sample-detail"', "/static/plotly.min.js"):
        assert marker in page
    with urllib.request.urlopen(served + "static/plotly.min.js", timeout=10) as r:
        assert r.status == 200 and b"plotly" in r.read(4096).lower()
    for name in ("app.js", "app.css"):
        with urllib.request.urlopen(served + "static/" + name, timeout=10) as r:
            assert r.status == 200


def test_a_half_written_last_line_is_skipped_until_complete(tmp_path):
    run_dir = write_run(tmp_path / "run", lineage=False)
    with open(run_dir / "metrics.jsonl", "a") as f:
        f.write('{"step": 4, "reward/me')  # the live run is mid-write
    data = RunData(run_dir)
    assert data.run()["step"] == 3 and data.run()["warnings"] == []
    with open(run_dir / "metrics.jsonl", "a") as f:
        f.write('an": 0.9}\n')
    assert data.run()["step"] == 4 and data.metrics(["reward/mean"])["rows"][-1] == {"step": 4, "reward/mean": 0.9}


def test_domains_follow_appended_rows_and_a_rewritten_file(tmp_path):
    run_dir = write_run(tmp_path / "run", lineage=False)
    data = RunData(run_dir)
    assert [d["reward"] for d in data.domains()] == [0.75, 0.25]
    with open(run_dir / "metrics.jsonl", "a") as f:
        f.write(json.dumps({"step": 4, "reward/domain/alpha": 0.9, "reward/domain/gamma": 0.1}) + "\n")
    table = {d["domain"]: d for d in data.domains()}
    assert (table["alpha"]["reward"], table["alpha"]["rewards"][-1], table["alpha"]["share"]) == (0.9, [4, 0.9], 0.55)
    assert (table["gamma"]["reward"], table["gamma"]["share"]) == (0.1, None)
    (run_dir / "metrics.jsonl").write_text(json.dumps({"step": 1, "outcome/delta": 1.0}) + "\n")  # a fresh file
    assert [(d["domain"], d["pass_rate"], d["rewards"]) for d in data.domains()] == [("delta", 1.0, [])]


def test_metrics_without_a_lineage_store_serve_an_empty_browser_with_a_note(tmp_path):
    server, _, url = start_view(write_run(tmp_path / "run", lineage=False), port=0)
    try:
        status, page = get(url + "api/samples")
        assert status == 200 and page["samples"] == [] and "no lineage store yet" in page["note"]
        assert get(url + "api/sample/1")[0] == 404
        assert len(get(url + "api/domains")[1]) == 2
    finally:
        server.shutdown()
        server.server_close()


def test_finished_when_summary_exists(tmp_path):
    run_dir = write_run(tmp_path / "run", lineage=False)
    (run_dir / "summary.json").write_text(json.dumps({"steps": 3}))
    assert RunData(run_dir).run()["status"] == "finished"


def test_missing_or_empty_directories_are_clear_errors(tmp_path, capsys):
    with pytest.raises(UserError, match="no such directory"):
        RunData(tmp_path / "absent")
    with pytest.raises(UserError, match=r"not a run directory \(no metrics.jsonl or lineage.sqlite\)"):
        RunData(tmp_path)
    (tmp_path / "file").write_text("x")
    with pytest.raises(UserError, match="not a directory"):
        RunData(tmp_path / "file")
    assert cli.main(["view", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err == f"error: {tmp_path}: not a run directory (no metrics.jsonl or lineage.sqlite)\n"


def test_the_command_line_reports_a_missing_directory_in_one_line():
    proc = subprocess.run([sys.executable, "-m", "tempering.cli", "view", "/nonexistent/run"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr == "error: /nonexistent/run: no such directory\n" and "Traceback" not in proc.stdout
