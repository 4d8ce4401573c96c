"""The lineage store: every sample with its fate, tool calls with their ExecResults, surviving a
SIGKILL of the run and continued by --resume; clear errors for a missing or broken store."""

import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from tempering import lineage
from tempering.errors import UserError
from tempering.lineage import LineageStore, read_samples, read_tool_calls
from tempering.records import ExecReason, ExecResult, Group, Reward, Task, ToolCall, Trajectory, Turn
from tempering.runtime.interface import Stall

ROOT = Path(__file__).parent.parent
TEXT_ONLY = ["--tasks.weights={ sorting = 1.0, strings = 1.0 }", "--model.hidden_size=32",
             "--model.intermediate_size=64", "--model.num_hidden_layers=2", "--model.num_attention_heads=2",
             "--model.num_key_value_heads=1", "--run.threads=1", "--tasks.eval_per_domain=4",
             "--tasks.sft_per_domain=16", "--sft.steps=3", "--rollout.tasks_per_step=6",
             "--rollout.samples_per_task=2", "--metrics.progress=false", "--metrics.plot=false",
             "--run.stall_timeout_s=120"]
FATES = {"trained", "stale", "failed", "uniform", "alone"}


def episode_group() -> Group:
    """One two-sample group; sample 0 is an episode with a tool call that ran in the sandbox."""
    result = ExecResult(ExecReason.NONZERO_EXIT, 1, stdout="out", stderr="Traceback", wall_s=0.25, cpu_s=0.125,
                        peak_memory_mb=12.5, start="warm", files={"a.txt": b"x"})
    call = ToolCall("run", {"cmd": "python t.py"}, output="exit 1", result=result)
    unknown = ToolCall("fly", {}, error="unknown tool", error_kind="unknown_tool")
    turns = [Turn("assistant", 0, 3, (call, unknown)), Turn("tool", 3, 5), Turn("assistant", 5, 7)]
    long_prompt = "p" * 1000  # stored in full (samples.jsonl cuts at 200)
    episode = Trajectory("t1", "code", 0, [1, 2], [5] * 7, [0.0] * 7, [1, 1, 1, 0, 0, 1, 1],
                         [3, 3, 4, -1, -1, 4, 4], "x" * 500, "stop", turns)
    single = Trajectory("t1", "code", 1, [1, 2], [6, 6], [0.0, 0.0], [1, 1], [4, 4], "yy", "length")
    rewards = [Reward({"outcome": 1.0, "format": 0.5}, {"outcome": 1.0, "format": 0.2}, 1.1),
               Reward({}, {}, 0.0, failed=True, reason="verifier crashed")]
    return Group(Task("t1", "code", long_prompt), [episode, single], rewards)


def test_a_sample_is_stored_in_full_with_its_tool_calls(tmp_path):
    store = LineageStore(tmp_path)
    g = episode_group()
    store.record(g, 0, "trained", 7)
    store.record(g, 1, "failed", 7)
    store.close()
    a, b = read_samples(tmp_path)
    assert (a.step, a.task, a.domain, a.sample_index, a.fate) == (7, "t1", "code", 0, "trained")
    assert a.prompt == "p" * 1000 and a.completion == "x" * 500 and a.finish_reason == "stop"
    # versions of model tokens only for min/max; the per-token list run-length encoded, tool output -1
    assert (a.version_min, a.version_max, a.tokens) == (3, 4, 5)
    assert a.versions == [[3, 2], [4, 1], [-1, 2], [4, 2]]
    assert a.components == {"outcome": 1.0, "format": 0.5} and a.weights["format"] == 0.2 and a.reward == 1.1
    assert a.turns == [["assistant", 0, 3], ["tool", 3, 5], ["assistant", 5, 7]]
    assert (b.fate, b.failed, b.reason, b.turns) == ("failed", True, "verifier crashed", [])
    calls = read_tool_calls(tmp_path, a.id)
    assert [c["name"] for c in calls] == ["run", "fly"]
    assert calls[0]["exec_reason"] == "nonzero_exit" and calls[0]["exit_code"] == 1
    assert (calls[0]["stderr"], calls[0]["wall_s"], calls[0]["cpu_s"]) == ("Traceback", 0.25, 0.125)
    assert (calls[0]["peak_memory_mb"], calls[0]["start"], json.loads(calls[0]["files"])) == (12.5, "warm", ["a.txt"])
    assert json.loads(calls[0]["arguments"]) == {"cmd": "python t.py"}
    assert calls[1]["error_kind"] == "unknown_tool" and calls[1]["exec_reason"] is None
    assert read_tool_calls(tmp_path, b.id) == []
    lines = [json.loads(x) for x in (tmp_path / "samples.jsonl").read_text().splitlines()]
    assert [x["fate"] for x in lines] == ["trained", "failed"] and len(lines[0]["prompt"]) == 200


def test_rewind_drops_the_steps_a_resume_redoes(tmp_path):
    store = LineageStore(tmp_path)
    g = episode_group()
    for step in range(4):
        store.record(g, 0, "trained", step)
    store.close()
    lineage.rewind(tmp_path, 2)
    assert [s.step for s in read_samples(tmp_path)] == [0, 1]
    db = sqlite3.connect(tmp_path / lineage.FILENAME)
    assert db.execute("SELECT count(*) FROM tool_calls").fetchone()[0] == 2 * 2  # the rewound ones' went too


def test_a_stuck_writer_is_a_stall_naming_the_store(tmp_path, monkeypatch):
    release = threading.Event()
    monkeypatch.setattr(lineage, "_commit", lambda *a: release.wait())
    store = LineageStore(tmp_path, deadline_s=0.5)
    store.record(episode_group(), 0, "trained", 0)
    with pytest.raises(Stall, match="lineage store"):
        store.flush()
    release.set()
    store.close()


def test_a_failing_writer_fails_the_run_naming_the_store(tmp_path, monkeypatch):
    def full_disk(*a):
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(lineage, "_commit", full_disk)
    store = LineageStore(tmp_path)
    store.record(episode_group(), 0, "trained", 0)
    with pytest.raises(RuntimeError, match="lineage store: the writer failed: .*disk is full"):
        store.close()


def test_missing_or_broken_store_is_a_clear_error(tmp_path):
    with pytest.raises(UserError, match=f"{tmp_path / 'lineage.sqlite'}: no lineage store"):
        read_samples(tmp_path)
    (tmp_path / "lineage.sqlite").write_bytes(b"")  # created, never written
    with pytest.raises(UserError, match="lineage.sqlite: unreadable lineage store .*no such table"):
        read_samples(tmp_path)
    (tmp_path / "lineage.sqlite").write_bytes(b"SQLite format 3\x00" + b"\x07" * 300)  # a torn header
    with pytest.raises(UserError, match="lineage.sqlite: unreadable lineage store"):
        read_samples(tmp_path)
    with pytest.raises(UserError, match="lineage.sqlite: not a lineage store"):
        LineageStore(tmp_path)


def _accounted(run: Path) -> dict[int, int]:
    """Samples per step as the run's metrics count them (trained + every dropped reason); a line
    torn by the kill is left out."""
    counts = {}
    for line in (run / "metrics.jsonl").read_text().splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        counts[row["step"] - 1] = sum(v for k, v in row.items() if k == "samples/trained"
                                      or k.startswith("samples/dropped_"))
    return counts


def test_every_sample_of_a_run_is_in_the_store_with_its_fate(tmp_path):
    from tempering.config import load_config
    from tempering.train import train

    cfg = load_config("configs/demo.toml", [*TEXT_ONLY, f"--run.dir={tmp_path}", "--run.name=l", "--run.steps=3"])
    summary = train(cfg)
    run = tmp_path / "l"
    samples = read_samples(run)
    assert samples and {s.fate for s in samples} <= FATES and all(s.completion is not None for s in samples)
    assert dict(Counter(s.step for s in samples)) == _accounted(run) and len(_accounted(run)) == 3
    assert dict(Counter(s.fate for s in samples)) == summary["samples"]
    assert {s.domain for s in samples} == {"sorting", "strings"}


def test_store_survives_kill_9_and_resume_continues_it(tmp_path):
    args = [sys.executable, "-m", "tempering.cli", "train", "--config", "configs/demo.toml", *TEXT_ONLY,
            f"--run.dir={tmp_path}", "--run.name=k", "--run.checkpoint_every=2"]
    proc = subprocess.Popen([*args, "--run.steps=400"], cwd=ROOT, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    run = tmp_path / "k"
    deadline = time.monotonic() + 240
    while not (run / "checkpoints" / "step-000004").exists():
        assert proc.poll() is None, proc.stderr.read().decode()[-3000:]
        assert time.monotonic() < deadline, "no checkpoint appeared"
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)  # the trainer, its lineage writer thread and its rollout worker
    proc.wait()

    # What was committed is readable read-only and consistent: whole steps (the last perhaps in
    # part), each as the metrics counted it, and no tool-call row without its sample.
    killed = read_samples(run)
    per_step = Counter(s.step for s in killed)
    last = max(per_step)
    assert sorted(per_step) == list(range(last + 1)) and last >= 1  # 4 steps had run
    accounted = _accounted(run)
    assert all(per_step[s] == accounted[s] for s in range(last))
    db = sqlite3.connect(f"file:{run / 'lineage.sqlite'}?mode=ro", uri=True)
    orphans = "SELECT count(*) FROM tool_calls WHERE sample_id NOT IN (SELECT id FROM samples)"
    assert db.execute(orphans).fetchone() == (0,)
    db.close()

    latest = int((run / "checkpoints" / "latest").read_text().split("-")[1])
    r = subprocess.run([*args, "--resume", f"--run.steps={latest + 2}"], capture_output=True, text=True,
                       timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    resumed = read_samples(run)
    # the steps from the checkpoint on were redone and appended after what the killed run kept
    assert dict(Counter(s.step for s in resumed)) == _accounted(run)
    assert sorted(_accounted(run)) == list(range(latest + 2))
    kept = [s for s in resumed if s.step < latest]
    assert [s.id for s in kept] == [s.id for s in killed if s.step < latest]
    assert min(s.id for s in resumed if s.step >= latest) > max(s.id for s in kept)
    assert {s.fate for s in resumed} <= FATES
