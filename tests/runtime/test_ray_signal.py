"""`tempering train --runtime.kind=ray --runtime.address=local` stopped by SIGTERM to its whole
process group, as a scheduler (or Ctrl-C in a terminal) sends it: the private Ray instance runs
in a session of its own, so it survives the signal, the run finishes cleanly (checkpoint, final
evaluation, summary naming the signal) and exits 0, and no process of that instance is left.
Two replicas and a second trainer rank, all actors of that instance: more workers than cores."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("ray", reason="Ray is not installed (pip install 'tempering[ray]')")

ROOT = Path(__file__).parent.parent.parent
TINY = ["--model.hidden_size=32", "--model.intermediate_size=64", "--model.num_hidden_layers=2",
        "--model.num_attention_heads=2", "--model.num_key_value_heads=1", "--run.threads=1",
        "--tasks.eval_per_domain=4", "--tasks.sft_per_domain=32", "--rollout.tasks_per_step=4",
        "--rollout.samples_per_task=4", "--sft.steps=1", "--sft.batch_size=16", "--sandbox.workers=1",
        "--reward.workers=1", "--metrics.progress=false", "--metrics.tensorboard=false", "--metrics.plot=false",
        "--run.checkpoint_every=0", "--run.steps=100000", "--run.stall_timeout_s=60",
        "--runtime.kind=ray", "--runtime.address=local",
        # more workers than this 2-core machine has cores: the private instance offers a CPU to each
        # and the custom resources a cluster's config asks for (a cluster's nodes would offer them)
        "--runtime.replicas=2", "--runtime.trainer_ranks=2", "--runtime.replica_resources={ engine = 1 }",
        "--runtime.trainer_resources={ trainer = 1 }"]


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            # the fields after the command's closing parenthesis: state, ppid, ...
            ppid = int(Path(f"/proc/{entry}/stat").read_text().rpartition(")")[2].split()[1])
        except (ValueError, OSError, IndexError):
            continue
        tree.setdefault(ppid, []).append(int(entry))
    return tree


def _group(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[2])


def _descendants(pid: int) -> dict[int, str]:
    """Every process below `pid` now, with its command line (to tell a reused pid apart)."""
    tree, found, todo = _children(), {}, [pid]
    while todo:
        for child in tree.get(todo.pop(), []):
            found[child] = _cmdline(child)
            todo.append(child)
    return found


def _program(cmdline: str) -> str:
    return Path(cmdline.split("\0")[0]).name


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return ""


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="lists processes through /proc")
def test_sigterm_to_the_process_group_ends_a_local_ray_run_cleanly(tmp_path):
    cmd = [sys.executable, "-m", "tempering.cli", "train", "--config", "configs/demo.toml",
           f"--run.dir={tmp_path}", "--run.name=sig", *TINY]
    proc = subprocess.Popen(cmd, cwd=ROOT, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        metrics = tmp_path / "sig" / "metrics.jsonl"
        deadline = time.monotonic() + 240
        while not (metrics.exists() and metrics.read_text().strip()):
            assert proc.poll() is None, proc.stderr.read().decode()[-3000:]
            assert time.monotonic() < deadline, "no RL step appeared"
            time.sleep(0.2)
        ray_processes = _descendants(proc.pid)
        heads = [p for p, c in ray_processes.items() if _program(c) in ("raylet", "gcs_server")]
        assert len(heads) == 2, ray_processes  # the private instance
        # the signal cannot reach them (in the trainer's group, they died with it: a run that
        # still needed them, to place a worker, hung; one that did not finished by chance)
        assert all(_group(p) != proc.pid for p in heads), {p: (_group(p), ray_processes[p][:80]) for p in heads}
        os.killpg(proc.pid, signal.SIGTERM)  # the trainer's whole group, as a scheduler does
        out, err = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 0, err.decode()[-3000:]
    assert "Traceback" not in err.decode(), err.decode()[-3000:]
    run = tmp_path / "sig"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["stopped"] == "SIGTERM" and summary["steps"] >= 1
    assert len(summary["replicas"]["nodes"]) == 2 and list(summary["trainer_ranks"]) == ["trainer-rank-1"]
    assert (run / "checkpoints" / "latest").read_text() == f"step-{summary['steps']:06d}"
    assert (run / "eval_final.json").exists()
    printed = out.decode()
    assert json.loads(printed[printed.index("\n{\n"):])["stopped"] == "SIGTERM"  # the summary, printed last
    left = {pid: c for pid, c in ray_processes.items() if _cmdline(pid) == c and c}
    assert not left, f"processes of the run's Ray instance left running: {left}"
