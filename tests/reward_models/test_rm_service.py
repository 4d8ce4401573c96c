"""A reward model as a reward component: the service's `rm_<name>` equals the model's own score of
the rendered (prompt, answer) text, groups scored at once share the worker's batches, a dead
worker fails the samples (never scores them), and a short training run logs the component and
its time in metrics."""

import json
import os
import signal
import string
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch

from tempering.config import RewardConfig, RewardModelConfig
from tempering.models import Arch, build_classifier, load_classifier, save_classifier
from tempering.records import Budget, Task, Trajectory
from tempering.reward import RewardService, Submission
from tempering.reward.reward_model import render_text
from tempering.tokenizer import char_tokenizer, load_tokenizer

ROOT = Path(__file__).parent.parent.parent
POLICY = char_tokenizer(string.printable)


def rm_folder(path: Path) -> Path:
    tok = char_tokenizer(string.printable)
    tok.save(path)
    arch = Arch(vocab_size=tok.vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=256, pad_token_id=tok.pad_id)
    save_classifier(build_classifier(arch, 1, seed=3), path)
    return path


def task(i: int) -> Task:
    return Task(id=f"t{i}", domain="sorting", prompt=f"sort {i}721=", answer="".join(sorted(f"{i}721")),
                budget=Budget(time_limit_s=2))


def sample(text: str) -> Trajectory:
    ids = POLICY.encode(text) + [POLICY.eos_id]
    return Trajectory(task_id="t", domain="sorting", sample_index=0, prompt_ids=[5], token_ids=ids,
                      logprobs=[0.0] * len(ids), loss_mask=[1] * len(ids), versions=[0] * len(ids),
                      text=POLICY.decode(ids), finish_reason="stop")


def reference_score(folder: Path, prompt: str, answer: str) -> float:
    """The model in this process, one text alone: the oracle for what the service reports."""
    model, tok = load_classifier(folder).eval(), load_tokenizer(folder)
    ids = tok.encode_prompt(render_text(tok, prompt, answer))
    with torch.inference_mode():
        return model(torch.tensor([ids]))[0, 0].item()


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return rm_folder(tmp_path_factory.mktemp("rm"))


def cfg(folder: Path, **model) -> RewardConfig:
    return RewardConfig(models={"q": RewardModelConfig(path=str(folder), max_wait_ms=20.0, **model)},
                        scorers={"sorting": ["rm_q"]},
                        domain_weights={"sorting": {"outcome": 1.0, "partial": 0.0, "rm_q": 0.5}})


def test_rm_component_is_the_models_score_and_groups_share_batches(folder):
    svc = RewardService(cfg(folder), POLICY)
    groups = [[Submission(task(i), sample(a)) for a in ("1", "127", "1277", "7721x")] for i in range(1, 7)]
    results: dict[int, list] = {}
    try:
        threads = [threading.Thread(target=lambda i=i: results.__setitem__(i, svc.score(groups[i])))
                   for i in range(len(groups))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        stats = svc.graders.models["q"].stats()
    finally:
        svc.close()
    for i, group in enumerate(groups):
        for item, reward in zip(group, results[i]):
            want = reference_score(folder, item.task.prompt, item.sample.text)
            assert reward.components["rm_q"] == pytest.approx(want, abs=1e-5)
            assert reward.total == pytest.approx(reward.components["outcome"] + 0.5 * want, abs=1e-5)
    assert stats["requests"] == len(groups) and stats["gathers"] < len(groups)  # groups gathered together
    assert svc.take_seconds()["rm_q"] > 0


def test_a_dead_reward_model_fails_the_samples(folder):
    svc = RewardService(cfg(folder), POLICY)
    try:
        os.kill(svc.graders.models["q"].pid, signal.SIGKILL)
        rewards = svc.score([Submission(task(1), sample("1127"))])
    finally:
        svc.close()
    assert rewards[0].failed and rewards[0].total == 0.0 and "rm_q" in rewards[0].reason


def test_a_short_run_logs_the_rm_component_and_its_time(tmp_path, folder):
    tiny = ["--model.hidden_size=32", "--model.intermediate_size=64", "--model.num_hidden_layers=2",
            "--model.num_attention_heads=2", "--model.num_key_value_heads=1", "--run.threads=1",
            "--tasks.eval_per_domain=8", "--tasks.sft_per_domain=64", "--rollout.tasks_per_step=4",
            "--rollout.samples_per_task=4", "--sft.steps=3", "--sft.batch_size=16", "--metrics.progress=false"]
    args = [sys.executable, "-m", "tempering.cli", "train", "--config", "configs/demo_rm.toml", f"--run.dir={tmp_path}",
            "--run.name=rm", "--run.steps=2", *tiny, f"--reward.models.quality.path={folder}",
            "--tasks.weights={sorting=1.0}"]  # the config scores sorting only: every step has the component
    r = subprocess.run(args, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    rows = [json.loads(line) for line in (tmp_path / "rm" / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 2
    for row in rows:
        assert "component/rm_quality" in row and "component/rm_quality_raw" in row
    # the worker's time since the batch before (a batch's groups may be scored before the last is handed over)
    assert sum(row["seconds/rollout_rm_quality"] for row in rows) > 0
    samples = [json.loads(line) for line in (tmp_path / "rm" / "samples.jsonl").read_text().splitlines()]
    assert any("rm_quality" in s["components"] for s in samples)
