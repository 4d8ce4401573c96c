"""Metrics: what TensorBoard's own reader finds in the event file is what was logged, per step."""

import json

from tempering.config import MetricsConfig
from tempering.metrics import Metrics


def test_tensorboard_scalars_read_back_as_logged(tmp_path):
    m = Metrics(tmp_path, MetricsConfig(tensorboard=True, progress=False, plot=False), total_steps=2)
    m.log(1, {"reward": {"mean": 0.25, "domain": {"a": 1.0}}, "loss": 3.0, "skipped": float("nan"), "note": "x"})
    m.log(2, {"reward": {"mean": 0.5, "domain": {"a": 0.0}}, "loss": 2.0})
    m.close()
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    assert sorted(events.Tags()["scalars"]) == ["loss", "reward/domain/a", "reward/mean"]
    assert [(e.step, e.value) for e in events.Scalars("reward/mean")] == [(1, 0.25), (2, 0.5)]
    assert [(e.step, e.value) for e in events.Scalars("loss")] == [(1, 3.0), (2, 2.0)]
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert rows[0] == {"step": 1, "reward/mean": 0.25, "reward/domain/a": 1.0, "loss": 3.0}
