"""Experiment trackers a run's step metrics also go to: Weights & Biases and MLflow.

Each is used only when `metrics.trackers` names it, and needs its package (`pip install wandb`,
`pip install mlflow-skinny`); a tracker named whose package is missing is a one-line error at
start, never a silent skip. A tracker gets every step's flat numbers (the metrics.jsonl row)
and the run's config.json once; its run is named after the run directory, and its id is kept
there (`wandb.id`, `mlflow.id`) so a `--resume`d run continues the same tracker run. Where the
numbers go (W&B's mode and entity, MLflow's server) is the trackers' own business: W&B reads
WANDB_MODE / WANDB_API_KEY from the environment; MLflow's URI is `metrics.mlflow_uri`, else
MLFLOW_TRACKING_URI. Nothing here reads numbers back; `Metrics` owns the trackers.
"""

from __future__ import annotations

import importlib
import json
import secrets
import time
from pathlib import Path
from types import ModuleType
from typing import Callable, Protocol

from tempering.errors import UserError
from tempering.jsonvalue import JSONObject

MLFLOW_BATCH = 1000  # MLflow's limit of metrics per log_batch call


class Tracker(Protocol):
    def log(self, step: int, flat: dict[str, float]) -> None: ...

    def close(self) -> None: ...


def _need(module: str, package: str) -> ModuleType:
    try:
        return importlib.import_module(module)
    except ImportError:
        raise UserError(f"metrics.trackers: {module!r} needs the {package} package (pip install {package})") from None


def _run_config(run_dir: Path) -> JSONObject:
    path = run_dir / "config.json"
    return json.loads(path.read_text()) if path.exists() else {}


def _kept_id(run_dir: Path, name: str) -> str | None:
    path = run_dir / name
    return path.read_text().strip() or None if path.exists() else None


class WandbTracker:
    def __init__(self, run_dir: Path, project: str):
        wandb = _need("wandb", "wandb")
        run_id = _kept_id(run_dir, "wandb.id") or secrets.token_hex(4)  # W&B ids: [a-z0-9]
        (run_dir / "wandb.id").write_text(run_id + "\n")
        # resume="allow": a resumed run continues this one; W&B drops steps it has already seen
        self.run = wandb.init(project=project, name=run_dir.name, id=run_id, dir=str(run_dir), resume="allow",
                              config=_run_config(run_dir))

    def log(self, step: int, flat: dict[str, float]) -> None:
        self.run.log(flat, step=step)

    def close(self) -> None:
        self.run.finish()


class MlflowTracker:
    def __init__(self, run_dir: Path, project: str, uri: str):
        tracking = _need("mlflow.tracking", "mlflow-skinny")
        self._entities = _need("mlflow.entities", "mlflow-skinny")
        self.client = tracking.MlflowClient(tracking_uri=uri or None)
        self.run_id = _kept_id(run_dir, "mlflow.id")
        if self.run_id is None:
            experiment = self.client.get_experiment_by_name(project)
            experiment_id = experiment.experiment_id if experiment else self.client.create_experiment(project)
            self.run_id = self.client.create_run(experiment_id, run_name=run_dir.name).info.run_id
            (run_dir / "mlflow.id").write_text(self.run_id + "\n")
            params = [self._entities.Param(k, str(v)[:6000]) for k, v in _flat_config(_run_config(run_dir)).items()]
            for i in range(0, len(params), 100):  # MLflow's limit of params per batch
                self.client.log_batch(self.run_id, params=params[i:i + 100])
        else:
            self.client.update_run(self.run_id, status="RUNNING")

    def log(self, step: int, flat: dict[str, float]) -> None:
        now = int(time.time() * 1000)
        metrics = [self._entities.Metric(k, v, now, step) for k, v in flat.items()]
        for i in range(0, len(metrics), MLFLOW_BATCH):
            self.client.log_batch(self.run_id, metrics=metrics[i:i + MLFLOW_BATCH])

    def close(self) -> None:
        self.client.set_terminated(self.run_id)


def _flat_config(config: JSONObject, prefix: str = "") -> JSONObject:
    out: JSONObject = {}
    for k, v in config.items():
        if isinstance(v, dict) and v:
            out.update(_flat_config(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def open_trackers(run_dir: Path, names: tuple[str, ...], project: str, mlflow_uri: str) -> list[Tracker]:
    """The trackers `names` asks for, each started (its run created or resumed)."""
    made: dict[str, Callable[[], Tracker]] = {"wandb": lambda: WandbTracker(run_dir, project),
                            "mlflow": lambda: MlflowTracker(run_dir, project, mlflow_uri)}
    return [made[name]() for name in names]
