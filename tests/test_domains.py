"""The domain contract: weights by domain, family or glob; datasets drawn without replacement;
a plugin domain from a package outside Tempering, used by a spawned worker; a heavy verifier
that overruns its deadline is killed with its process, and its deadline starts with that process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tempering.config import RewardConfig, TasksConfig
from tempering.errors import UserError
from tempering.pool import TaskPool
from tempering.records import Task, Trajectory
from tempering.reward import RewardService, Submission, Verdict
from tempering.tasks import Domain, register, resolve_weights
from tempering.tasks.answers import exact_answer
from tempering.tokenizer import char_tokenizer

ROOT = Path(__file__).parent.parent
PLUGIN = Path(__file__).parent / "plugin_pkg"


def _fixed(name: str):
    return lambda rng: Task(id="", domain=name, prompt=f"{name} {rng.random()}", answer="a")


DATA = [Task(id=f"ds-{i}", domain="toy/data", prompt=f"q{i}", answer="a") for i in range(5)]
register([Domain(f"toy/{n}", "a toy", exact_answer, make=_fixed(f"toy/{n}")) for n in ("a", "b", "c")]
         + [Domain("toy/data", "a dataset", exact_answer, load=lambda split: DATA if split == "train" else DATA[:1])],
         "test_domains")


def test_weights_by_family_glob_and_domain():
    w = resolve_weights({"toy": 3.0})  # a family shares its weight
    assert w == {"toy/a": 0.75, "toy/b": 0.75, "toy/c": 0.75, "toy/data": 0.75}
    w = resolve_weights({"toy/[ab]": 2.0, "toy/b": 5.0, "sorting": 1.0})  # a domain's own key wins
    assert w == {"toy/a": 1.0, "toy/b": 5.0, "sorting": 1.0}
    with pytest.raises(UserError, match="tasks.weights.chess: no domain, family or glob"):
        resolve_weights({"chess": 1.0})


def test_a_dataset_is_drawn_without_replacement_epoch_by_epoch():
    pool = TaskPool(TasksConfig(weights={"toy/data": 1.0}, eval_per_domain=3))
    drawn = [t.id for t in pool.next_tasks(10)]
    assert sorted(drawn[:5]) == sorted(drawn[5:]) == [t.id for t in DATA]  # each once per epoch
    assert drawn[:5] != drawn[5:]  # a new order each epoch (seeded)
    assert [t.id for t in pool.heldout()] == ["ds-0"]  # its own split


def _hang(task, sample, ctx):
    Path(task.answer).write_text(str(os.getpid()))
    time.sleep(3600)
    return Verdict({"outcome": 1.0})


def _quick(task, sample, ctx):
    return Verdict({"outcome": 1.0}, "done")


def _slowly(tokenizer, seconds):
    time.sleep(seconds)  # in the worker process, as it starts
    return tokenizer


class _SlowToStart:
    """A tokenizer whose copy in a heavy verifier's worker process takes `seconds` to arrive."""

    def __init__(self, tokenizer, seconds):
        self.tokenizer, self.seconds = tokenizer, seconds

    def __reduce__(self):
        return _slowly, (self.tokenizer, self.seconds)


register([Domain("slow/hang", "a verifier that never returns", _hang, make=_fixed("slow/hang"), heavy=True),
          Domain("slow/quick", "a verifier that returns at once", _quick, make=_fixed("slow/quick"), heavy=True)],
         "test")


def _sample(domain: str) -> Trajectory:
    return Trajectory(task_id="h", domain=domain, sample_index=0, prompt_ids=[4], token_ids=[4, 2],
                      logprobs=[0.0, 0.0], loss_mask=[1, 1], versions=[0, 0], text="a", finish_reason="stop")


def test_a_heavy_verifier_past_its_deadline_is_killed_with_its_process(tmp_path):
    tok = char_tokenizer("a")
    pidfile = tmp_path / "pid"
    svc = RewardService(RewardConfig(timeout_s=3.0, workers=1), tok)
    try:
        (r,) = svc.score([Submission(Task(id="h", domain="slow/hang", prompt="", answer=str(pidfile)),
                                     _sample("slow/hang"))])
        assert r.failed and "timed out" in r.reason
        pid = int(pidfile.read_text())  # it ran in another process, which is gone
        assert pid != os.getpid()
        for _ in range(100):
            if not Path(f"/proc/{pid}").exists():
                break
            time.sleep(0.1)
        assert not Path(f"/proc/{pid}").exists(), "the verifier's process still runs"
    finally:
        svc.close()


def test_a_heavy_verifiers_deadline_counts_from_its_process_start():
    """A worker process slower to start than the deadline (it imports the package: seconds on a
    loaded machine) does not time the verifier out before it ran."""
    svc = RewardService(RewardConfig(timeout_s=3.0, workers=1), _SlowToStart(char_tokenizer("a"), 5.0))
    try:
        (r,) = svc.score([Submission(Task(id="q", domain="slow/quick", prompt="", answer="a"), _sample("slow/quick"))])
        assert not r.failed and r.components["outcome"] == 1.0, r.reason
    finally:
        svc.close()


def test_closing_the_service_ends_a_wait_for_a_heavy_verifier():
    """A verifier thread waiting for a process that never starts is woken by `close` (an exiting
    interpreter joins that thread: it once held pytest's exit forever)."""
    svc = RewardService(RewardConfig(timeout_s=3.0, workers=1), _SlowToStart(char_tokenizer("a"), 3600.0))
    got = []
    scoring = threading.Thread(target=lambda: got.extend(svc.score(
        [Submission(Task(id="q", domain="slow/quick", prompt="", answer="a"), _sample("slow/quick"))])))
    scoring.start()
    deadline = time.monotonic() + 60
    while not svc._pending and time.monotonic() < deadline:
        time.sleep(0.01)
    assert svc._pending, "the heavy verification was never scheduled"
    svc.close()
    scoring.join(30)
    assert not scoring.is_alive() and got[0].failed and "the reward service closed" in got[0].reason, got


def test_a_plugin_domain_from_another_package_trains_in_a_spawned_worker(tmp_path):
    """extdomains is installed only as far as Python can see it (a folder on PYTHONPATH with its
    dist-info): its entry point registers ext/echo in the trainer and in the rollout worker."""
    env = {**os.environ, "PYTHONPATH": str(PLUGIN)}
    tiny = ["--model.hidden_size=16", "--model.intermediate_size=32", "--model.num_hidden_layers=1",
            "--model.num_attention_heads=2", "--model.num_key_value_heads=1", "--tasks.eval_per_domain=4",
            "--tasks.sft_per_domain=32", "--sft.steps=2", "--rollout.tasks_per_step=2", "--rollout.samples_per_task=2",
            "--metrics.progress=false", "--metrics.tensorboard=false", "--run.threads=1"]
    r = subprocess.run([sys.executable, "-m", "tempering.cli", "train", *tiny, '--tasks.weights={"ext/echo" = 1.0}',
                        "--run.steps=2", f"--run.dir={tmp_path}", "--run.name=p"],
                       capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    fates = [json.loads(line) for line in (tmp_path / "p" / "samples.jsonl").read_text().splitlines()]
    assert fates and {f["domain"] for f in fates} == {"ext/echo"}  # generated and scored in the worker
    listed = subprocess.run([sys.executable, "-m", "tempering.cli", "tasks", "list"], capture_output=True,
                            text=True, timeout=120, cwd=ROOT, env=env)
    assert "ext/echo" in listed.stdout
    # without the package on the path, the same mix is an error that names the key
    r = subprocess.run([sys.executable, "-m", "tempering.cli", "train", *tiny, '--tasks.weights={"ext/echo" = 1.0}',
                        f"--run.dir={tmp_path}", "--run.name=q"], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 2 and "tasks.weights.ext/echo" in r.stderr


def test_plugins_named_in_the_config_are_imported(tmp_path, monkeypatch):
    (tmp_path / "mydomains.py").write_text(
        "from tempering.tasks import Domain\nfrom tempering.tasks.answers import exact_answer\n"
        "from tempering.records import Task\n"
        "DOMAIN = Domain('mine', 'a config plugin', exact_answer, make=lambda rng: Task(id='', domain='mine', "
        "prompt='p', answer='a'))\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    pool = TaskPool(TasksConfig(weights={"mine": 1.0}, plugins=("mydomains",)))
    assert [t.domain for t in pool.next_tasks(2)] == ["mine", "mine"]
    with pytest.raises(UserError, match="tasks.plugins: cannot import 'nosuchmodule'"):
        TaskPool(TasksConfig(weights={"mine": 1.0}, plugins=("nosuchmodule",)))


@pytest.mark.parametrize("definition, message", [
    ("make=lambda rng: Task(id='', domain='badlv', prompt='p', answer='a'), levels=0", "levels must be an integer >= 1"),
    ("make=lambda rng: Task(id='', domain='badlv', prompt='p', answer='a'), levels=3", "make must take \\(rng, level\\)"),
    ("load=lambda split: [], levels=2", "> 1 only for a generator"),
])
def test_a_plugin_domain_with_bad_levels_is_an_error_naming_it(tmp_path, monkeypatch, definition, message):
    module = f"badlevels_{abs(hash(definition))}"
    (tmp_path / f"{module}.py").write_text(
        "from tempering.tasks import Domain\nfrom tempering.tasks.answers import exact_answer\n"
        f"from tempering.records import Task\nDOMAIN = Domain('badlv', 'a bad one', exact_answer, {definition})\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(UserError, match=f"tasks.plugins: {module}: domain badlv: .*{message}"):
        TaskPool(TasksConfig(weights={"badlv": 1.0}, plugins=(module,)))
