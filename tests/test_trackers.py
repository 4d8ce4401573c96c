"""W&B and MLflow trackers fed by `Metrics`, each read back from what its own package wrote:
MLflow through its client on a local file store, W&B offline through its run file (the LevelDB
log format of W&B's transaction log, records decoded with W&B's own protobufs)."""

import json
import struct
import time

import pytest

from tempering.config import ConfigError, MetricsConfig
from tempering.errors import UserError
from tempering.metrics import Metrics

STEPS = {1: {"reward/mean": 0.25, "reward/domain/code": 0.5, "tokens_per_s": 80.0},
         2: {"reward/mean": 0.75, "reward/domain/code": 1.0, "tokens_per_s": 96.5}}


def _log(run_dir, cfg, steps):
    (run_dir / "config.json").write_text(json.dumps({"run": {"name": run_dir.name}, "trainer": {"lr": 1e-4}}))
    metrics = Metrics(run_dir, cfg, total_steps=4, first_step=min(steps) - 1)
    try:
        for step in steps:
            metrics.log(step, STEPS[step])
    finally:
        metrics.close()


def test_mlflow_gets_every_step_and_a_resume_continues_its_run(tmp_path, monkeypatch):
    tracking = pytest.importorskip("mlflow.tracking")
    # MLflow's local file store (its database and server backends need the full mlflow package)
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    uri = (tmp_path / "mlruns").as_uri()
    cfg = MetricsConfig(progress=False, tensorboard=False, trackers=("mlflow",), project="exp", mlflow_uri=uri)
    run_dir = tmp_path / "r1"
    run_dir.mkdir()
    _log(run_dir, cfg, [1])
    _log(run_dir, cfg, [2])  # a resumed run: the same directory
    client = tracking.MlflowClient(tracking_uri=uri)
    runs = client.search_runs([client.get_experiment_by_name("exp").experiment_id])
    assert [r.info.run_name for r in runs] == ["r1"] and runs[0].info.status == "FINISHED"
    history = client.get_metric_history(runs[0].info.run_id, "reward/mean")
    assert [(m.step, m.value) for m in sorted(history, key=lambda m: m.step)] == [(1, 0.25), (2, 0.75)]
    assert runs[0].data.params["trainer.lr"] == "0.0001"


def _wandb_records(path):
    """W&B's .wandb file: a 7-byte header, then LevelDB log records in 32 KiB blocks."""
    data, pos, buf = path.read_bytes(), 7, b""
    while pos + 7 <= len(data):
        left = 32768 - pos % 32768
        if left < 7:  # a block's tail too short for a record header is padding
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        chunk, pos = data[pos + 7:pos + 7 + length], pos + 7 + length
        if kind == 1:  # full
            yield chunk
        elif kind in (2, 3):  # first, middle
            buf = chunk if kind == 2 else buf + chunk
        elif kind == 4:  # last
            yield buf + chunk


def test_wandb_offline_gets_every_step(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    from wandb.proto import wandb_internal_pb2

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    run_dir = tmp_path / "r2"
    run_dir.mkdir()
    _log(run_dir, MetricsConfig(progress=False, tensorboard=False, trackers=("wandb",), project="p"), [1, 2])
    run_id = (run_dir / "wandb.id").read_text().strip()
    [path] = run_dir.glob(f"wandb/offline-run-*-{run_id}/run-{run_id}.wandb")
    # W&B's core process may still be writing the file when `finish` returns: read until both the
    # run and every step are there, or the deadline
    deadline = time.monotonic() + 60
    while True:
        logged, names = {}, []
        for data in _wandb_records(path):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(data)
            kind = record.WhichOneof("record_type")
            if kind == "run":
                names.append((record.run.display_name, record.run.project))
            elif kind == "history":
                row = {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in record.history.item}
                logged[row["_step"]] = {k: v for k, v in row.items() if not k.startswith("_")}
        if (names and logged == STEPS) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert names and names[0] == ("r2", "p"), names
    assert logged == STEPS


def test_unknown_tracker_and_missing_package_are_clear_errors(tmp_path, monkeypatch):
    with pytest.raises(ConfigError, match="metrics.trackers"):
        MetricsConfig(trackers=("neptune",))
    import builtins

    real_import = builtins.__import__

    def no_wandb(name, *args, **kwargs):
        if name == "wandb" or name.startswith("wandb."):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_wandb)
    monkeypatch.delitem(__import__("sys").modules, "wandb", raising=False)
    with pytest.raises(UserError, match=r"metrics.trackers: 'wandb' needs the wandb package \(pip install wandb\)"):
        Metrics(tmp_path, MetricsConfig(progress=False, tensorboard=False, trackers=("wandb",)), 1)
