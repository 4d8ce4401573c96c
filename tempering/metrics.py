"""Metrics: one record per step to JSONL, TensorBoard and a progress bar; the reward plot.

`Metrics.log(step, values)` takes flat `name -> number` values (nested dicts are flattened with
'/'), writes a line to `metrics.jsonl`, scalars to TensorBoard event files, the step's values
to the Prometheus endpoint when one is asked for (`prometheus`) and to the experiment trackers
named (`trackers`: W&B, MLflow), and updates the terminal progress bar. The dashboard (`tempering view`) reads the run directory; it is not fed from here.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Mapping

from tempering.config import MetricsConfig
from tempering.trackers import open_trackers

if TYPE_CHECKING:
    from tqdm import tqdm


def flatten(values: Mapping[str, object], prefix: str = "") -> dict[str, float]:  # non-numbers dropped
    out: dict[str, float] = {}
    for k, v in values.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key + "/"))
        elif isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
            out[key] = float(v)
    return out


def progress_bar(cfg: MetricsConfig, **kw: int | str | bool) -> "tqdm":  # kw: tqdm's (total, desc, ...)
    """A tqdm bar on stderr, drawn only when `metrics.progress` is on and stderr is a terminal: a
    bar redrawn into a log file is thousands of carriage returns. Otherwise a disabled bar, whose
    updates cost nothing."""
    from tqdm import tqdm

    return tqdm(unit="step", disable=not (cfg.progress and sys.stderr.isatty()), **kw)


class Metrics:
    def __init__(self, run_dir: Path, cfg: MetricsConfig, total_steps: int, first_step: int = 0):
        self.cfg = cfg
        self.path = run_dir / "metrics.jsonl"
        self._file = open(self.path, "a")
        self._tb = None
        if cfg.tensorboard:
            from torch.utils.tensorboard import SummaryWriter  # imported lazily: tensorboard is slow to import

            # A resumed run replaces whatever the interrupted one logged after its checkpoint.
            from tensorboard.compat.proto.summary_pb2 import Summary

            self._tb = SummaryWriter(str(run_dir / "tensorboard"), purge_step=first_step + 1 if first_step else None)
            self._summary = Summary
        self._prometheus = None
        if cfg.prometheus_port >= 0:
            from tempering.prometheus import PrometheusEndpoint

            self._prometheus = PrometheusEndpoint(run_dir, cfg.prometheus_host, cfg.prometheus_port)
            print(f"[tempering] Prometheus metrics at {self._prometheus.url}", file=sys.stderr, flush=True)
        self._trackers = open_trackers(run_dir, cfg.trackers, cfg.project, cfg.mlflow_uri) if cfg.trackers else []
        self._bar = progress_bar(cfg, total=total_steps, initial=first_step, desc="rl", dynamic_ncols=True)

    def log(self, step: int, values: Mapping[str, object]) -> None:
        flat = flatten(values)
        self._file.write(json.dumps({"step": step, **flat}) + "\n")
        self._file.flush()
        if self._tb is not None:  # one event per step: add_scalar per key costs ~40 us each
            values = [self._summary.Value(tag=k, simple_value=v) for k, v in flat.items()]
            self._tb._get_file_writer().add_summary(self._summary(value=values), step)
        if self._prometheus is not None:
            self._prometheus.update(step, flat)
        for tracker in self._trackers:
            tracker.log(step, flat)
        if not self._bar.disable:
            self._bar.update(1)
            self._bar.set_postfix({k.split("/")[-1]: f"{flat[k]:.3g}" for k in ("reward/mean", "loss", "tokens_per_s")
                                   if k in flat}, refresh=False)

    def amend(self, step: int, values: Mapping[str, object]) -> None:
        """Add `values` to the row of `step`, the last one written: what happened after the row
        (a checkpoint is written only once its step's row is on disk) still lands in its step.
        The file is rewritten whole and replaced, so a kill leaves the old row or the new one."""
        flat = flatten(values)
        self._file.close()
        lines = self.path.read_text().splitlines()
        row = json.loads(lines[-1]) if lines else {}
        assert row.get("step") == step, f"amend: the last row is step {row.get('step')}, not {step}"
        lines[-1] = json.dumps({**row, **flat})
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text("".join(line + "\n" for line in lines))
        tmp.replace(self.path)
        self._file = open(self.path, "a")
        if self._tb is not None:
            self._tb._get_file_writer().add_summary(
                self._summary(value=[self._summary.Value(tag=k, simple_value=v) for k, v in flat.items()]), step)
        if self._prometheus is not None:
            self._prometheus.update(step, {**row, **flat})
        for tracker in self._trackers:
            tracker.log(step, flat)

    def log_eval(self, step: int, accuracy: float, per_domain: dict[str, float]) -> None:
        """A held-out evaluation during RL: TensorBoard scalars under eval/ (the numbers are also in
        eval_step-*.json); metrics.jsonl keeps one row per step."""
        if self._tb is not None:
            self._tb.add_scalar("eval/accuracy", accuracy, step)
            for domain, acc in per_domain.items():
                self._tb.add_scalar(f"eval/domain/{domain}", acc, step)

    def close(self) -> None:
        self._file.close()
        if self._prometheus is not None:
            self._prometheus.close()
        for tracker in self._trackers:
            tracker.close()
        if self._tb is not None:
            self._tb.close()
        self._bar.close()


def rewind_jsonl(path: Path, keep: Callable[[dict], bool]) -> None:
    """Rewrite a JSONL log keeping the rows `keep` accepts; a torn last line (the process was
    killed mid-write) is dropped. Used on resume so the logs match the checkpoint."""
    if not path.exists():
        return
    rows = []
    for line in path.read_text().splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if keep(row):
            rows.append(line)
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(r + "\n" for r in rows))
    tmp.replace(path)


def plot_rewards(metrics_path: Path, out_png: Path) -> None:
    """Reward per domain against step, from metrics.jsonl."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [json.loads(line) for line in metrics_path.read_text().splitlines() if line.strip()]
    keys = sorted({k for r in rows for k in r if k.startswith("reward/domain/")})
    fig, ax = plt.subplots(figsize=(7, 4))
    for i, k in enumerate(keys):
        steps, values = zip(*[(r["step"], r[k]) for r in rows if k in r])
        color = f"C{i}"
        ax.plot(steps, values, color=color, alpha=0.25, linewidth=0.8)
        ax.plot(steps, _smooth(values), color=color, linewidth=2, label=k.rsplit("/", 1)[-1])
    ax.set_xlabel("step")
    ax.set_ylabel("mean reward")
    ax.set_title("Reward per domain (faint: per step, bold: moving average)")
    ax.grid(alpha=0.3)
    if keys:
        ax.legend()
    fig.tight_layout()
    fig.savefig(out_png, dpi=100)
    plt.close(fig)


def _smooth(values, alpha: float = 0.05) -> list[float]:
    """Exponential moving average, debiased so the first points are not pulled to zero."""
    out, avg, weight = [], 0.0, 0.0
    for v in values:
        avg = (1 - alpha) * avg + alpha * v
        weight = (1 - alpha) * weight + alpha
        out.append(avg / weight)
    return out
