"""Shared fixtures: tiny random HF models saved to a temp folder, one short real training run
(scraped at its Prometheus endpoint while it runs), and torch thread settings."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from run_helpers import ROOT, VIEW_ARTIFACTS, train_command

torch.set_num_threads(1)


@pytest.fixture(scope="session")
def hf_llama_dir(tmp_path_factory):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=101, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                                   bos_token_id=None, eos_token_id=None, pad_token_id=None)
    model = transformers.LlamaForCausalLM(cfg).eval()
    path = tmp_path_factory.mktemp("llama")
    model.save_pretrained(path)
    return path, model


@dataclass
class ShortRun:
    dir: Path
    returncode: int
    stderr: str
    scrapes: list[str]  # the Prometheus endpoint's answers while it ran, in order


@pytest.fixture(scope="module")
def browser():
    """Headless Chromium (Debian's, through Playwright), for the dashboard's browser tests."""
    sync_api = pytest.importorskip("playwright.sync_api")
    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.fail("Debian's chromium is not installed (scripts/test.sh installs it)")
    VIEW_ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_api.sync_playwright() as p:
        # --no-sandbox: Chromium's own sandbox refuses to start as root (CI runs as root)
        b = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        yield b
        b.close()


@pytest.fixture(scope="session")
def short_run(tmp_path_factory) -> ShortRun:
    """3 steps of the demo's mix, an evaluation at step 2, a checkpoint every 2 steps, and the
    Prometheus endpoint on a free port, scraped every 50 ms while the run lives. The code domain's
    programs run in the sandbox: 300 SFT steps make most of them end (at 40, a run could pass as
    few as two programs to the sandbox). Its cache holds a toolchain the sandbox's user cannot
    read (under pytest's private temporary folder): the mix needs none, so the run must not care."""
    root = tmp_path_factory.mktemp("short_run")
    (root / "cache" / "toolchain").mkdir(parents=True)
    (root / "cache" / "toolchain" / "manifest.json").write_text(
        '{"python": "3.11", "python_packages": {}, "apt_packages": [], "commands": []}')
    env = {**os.environ, "TEMPERING_CACHE": str(root / "cache")}
    proc = subprocess.Popen(train_command(root, "--run.name=e2e", "--run.steps=3", "--run.checkpoint_every=2",
                                          "--eval.every=2", "--sft.steps=300", "--metrics.prometheus_port=0"),
                            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    run, scrapes, deadline = root / "e2e", [], time.monotonic() + 300
    try:
        while proc.poll() is None and time.monotonic() < deadline:
            port = run / "prometheus.port"
            if port.exists() and port.read_text().strip():
                try:
                    url = f"http://127.0.0.1:{port.read_text().strip()}/metrics"
                    scrapes.append(urllib.request.urlopen(url, timeout=5).read().decode())
                except OSError:
                    pass  # the run closed its endpoint as it ended
            time.sleep(0.05)
        _, stderr = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        proc.kill()
    return ShortRun(run, proc.returncode, stderr, scrapes)
