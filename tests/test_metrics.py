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


_BARS = ("from tempering.config import MetricsConfig\nfrom tempering.metrics import progress_bar\n"
         "with progress_bar(MetricsConfig(), total=50, desc='rl') as bar:\n"
         "    for _ in range(50):\n        bar.update(1)\n")


def test_the_progress_bar_is_drawn_only_on_a_terminal(tmp_path):
    """By default (metrics.progress = true) the bar goes to stderr when it is a terminal, and
    not into a file it is redirected to."""
    import fcntl
    import os
    import pty
    import struct
    import subprocess
    import sys
    import termios

    with open(tmp_path / "stderr.txt", "w") as f:
        subprocess.run([sys.executable, "-c", _BARS], stderr=f, check=True, timeout=60)
    assert (tmp_path / "stderr.txt").read_text() == ""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # a new pty is 0 columns wide
    subprocess.run([sys.executable, "-c", _BARS], stderr=slave, check=True, timeout=60)
    os.close(slave)
    drawn = b""
    while True:
        try:
            chunk = os.read(master, 1 << 16)
        except OSError:  # EIO: every writer has closed the terminal
            break
        if not chunk:
            break
        drawn += chunk
    os.close(master)
    drawn = drawn.decode()
    assert "\r" in drawn and "50/50" in drawn, drawn
