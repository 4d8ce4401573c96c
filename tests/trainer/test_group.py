"""`TrainerGroup` (rank 0 here, rank 1 spawned, gloo on CPU) against the single-process
`Trainer` on the same batches: the same losses and weights after each step, a full state in the
single-process format that a single-process trainer resumes from exactly, and a group built from
that resumed trainer continuing exactly too; a sharded checkpoint (each rank's own shards) that a
new group resumes from bit for bit, and a single process too."""

from __future__ import annotations

import copy
import os
import signal
import time

import pytest
import torch

from test_fsdp import ALGO, ARCH, BATCHES, CFG
from tempering.models import build_model
from tempering.trainer import Trainer
from tempering.trainer.group import TrainerGroup

TIMEOUT_S = 120


def _close(a: torch.nn.Module, b: torch.nn.Module) -> None:
    for (name, x), (_, y) in zip(a.state_dict().items(), b.state_dict().items(), strict=True):
        torch.testing.assert_close(x, y, atol=2e-6, rtol=1e-5, msg=name)


def _same_state(a: dict, b: dict) -> None:
    assert a["scheduler"] == b["scheduler"]
    assert a["optimizer"]["param_groups"] == b["optimizer"]["param_groups"]
    assert set(a["optimizer"]["state"]) == set(b["optimizer"]["state"])
    for i, s in a["optimizer"]["state"].items():
        for key, value in s.items():
            torch.testing.assert_close(b["optimizer"]["state"][i][key], value, atol=2e-6, rtol=1e-5, msg=f"{i}.{key}")
    for name, t in a["reference"].items():
        torch.testing.assert_close(b["reference"][name], t, atol=0, rtol=0, msg=name)


def test_two_ranks_train_as_one_and_resume_from_the_single_process_state():
    oracle_model = build_model(ARCH, seed=0)
    oracle = Trainer(oracle_model, CFG, ALGO, total_steps=10)
    model = copy.deepcopy(oracle_model)
    group = TrainerGroup(model, Trainer(model, CFG, ALGO, total_steps=10), 2, threads=1, timeout_s=TIMEOUT_S)
    try:
        for batch in BATCHES[:2]:
            want, got = oracle.rl_step(batch), group.rl_step(batch)
            assert got.loss == pytest.approx(want.loss, abs=1e-6)
            assert got.grad_norm == pytest.approx(want.grad_norm, rel=1e-5)
            _close(oracle_model, model)  # the plain copy rank 0 publishes holds the new weights
        state = group.state_dict()
    finally:
        group.close()
    _same_state(oracle.state_dict(), state)

    # a checkpoint of the group resumes in one process, and in a new group, as the oracle goes on
    want = oracle.rl_step(BATCHES[2])
    resumed_model = copy.deepcopy(model)
    resumed = Trainer(resumed_model, CFG, ALGO, total_steps=10)
    resumed.load_state_dict(copy.deepcopy(state))  # (the optimizer would step the given tensors in place)
    assert resumed.rl_step(BATCHES[2]).loss == pytest.approx(want.loss, abs=1e-6)
    _close(oracle_model, resumed_model)
    again = Trainer(model, CFG, ALGO, total_steps=10)
    again.load_state_dict(copy.deepcopy(state))
    group = TrainerGroup(model, again, 2, threads=1, timeout_s=TIMEOUT_S)
    try:
        assert group.rl_step(BATCHES[2]).loss == pytest.approx(want.loss, abs=1e-6)
    finally:
        group.close()
    _close(oracle_model, model)


def test_a_follower_exits_when_rank_0_is_killed(tmp_path):
    import subprocess
    import sys

    script = tmp_path / "leader.py"
    script.write_text(
        "import sys, time\n"
        f"sys.path.insert(0, {str(os.path.dirname(__file__))!r})\n"
        "from test_fsdp import ALGO, ARCH, CFG\n"
        "from tempering.models import build_model\n"
        "from tempering.trainer import Trainer\n"
        "from tempering.trainer.group import TrainerGroup\n"
        "if __name__ == '__main__':\n"
        "    model = build_model(ARCH, seed=0)\n"
        "    group = TrainerGroup(model, Trainer(model, CFG, ALGO), 2, threads=1, timeout_s=60)\n"
        "    print(group._followers[0].process.pid, flush=True)\n"
        "    time.sleep(600)\n")
    leader = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    follower = int(leader.stdout.readline())
    os.kill(leader.pid, signal.SIGKILL)
    leader.wait()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.kill(follower, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    os.kill(follower, signal.SIGKILL)
    pytest.fail("the follower rank outlived its killed rank 0 by 30 s")


def test_a_sharded_checkpoint_resumes_exactly_in_a_new_group_and_in_one_process(tmp_path):
    """Each rank writes its shards into a `save_checkpoint` folder beside rank 0's HF model; a new
    group from another initialisation loads them and trains step 2 as the uninterrupted group
    did, bit for bit; a single process loads them too (DCP reads the full tensors)."""
    from tempering.tokenizer import char_tokenizer
    from tempering.trainer.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
    from tempering.trainer.distributed import read_shards

    model = build_model(ARCH, seed=0)
    group = TrainerGroup(model, Trainer(model, CFG, ALGO, total_steps=10), 2, threads=1, timeout_s=TIMEOUT_S)
    try:
        group.rl_step(BATCHES[0])
        saved = save_checkpoint(tmp_path, model, char_tokenizer("ab"), None, {"step": 1}, shards=group.save)
        at_save = copy.deepcopy(model.state_dict())
        want = group.rl_step(BATCHES[1])  # the uninterrupted run's step 2
    finally:
        group.close()
    assert latest_checkpoint(tmp_path) == saved and not (saved / "trainer.pt").exists()
    transformers = pytest.importorskip("transformers")
    hf = transformers.LlamaForCausalLM.from_pretrained(saved / "model").state_dict()
    for name, v in at_save.items():  # the HF folder is rank 0's full model (a tied lm_head is one tensor)
        assert torch.equal(hf[name], v), name

    loaded, trainer_state, state = load_checkpoint(saved)
    assert trainer_state is None and state == {"step": 1}
    fresh = build_model(ARCH, seed=7)  # what the shards do not restore shows in the weights
    group = TrainerGroup(fresh, Trainer(fresh, CFG, ALGO, total_steps=10), 2, threads=1, timeout_s=TIMEOUT_S)
    try:
        group.load(saved)
        for name, v in at_save.items():  # rank 0's plain copy (what is published) holds the loaded weights
            assert torch.equal(fresh.state_dict()[name], v), name
        got = group.rl_step(BATCHES[1])
    finally:
        group.close()
    assert str(got) == str(want)  # every number the same (value_loss is nan, != itself)
    for name, v in model.state_dict().items():
        assert torch.equal(fresh.state_dict()[name], v), name

    single = Trainer(loaded, CFG, ALGO, total_steps=10)
    read_shards(saved, single)  # no process group: the 2 ranks' shards read as full tensors
    assert single.reference is not None and single.scheduler.last_epoch == 1
    assert single.rl_step(BATCHES[1]).loss == pytest.approx(want.loss, abs=1e-6)
    _close(model, loaded)


def test_a_dead_rank_is_named_when_the_next_step_fails():
    model = build_model(ARCH, seed=0)
    group = TrainerGroup(model, Trainer(model, CFG, ALGO, total_steps=10), 2, threads=1, timeout_s=30)
    try:
        os.kill(group._followers[0].process.pid, signal.SIGKILL)
        group._followers[0].process.join(10)
        with pytest.raises(RuntimeError, match="trainer-rank-1: died with exit code -9"):
            group.rl_step(BATCHES[0])
    finally:
        group.close()
