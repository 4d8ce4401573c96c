"""The run's trainer group with pipeline stages (`trainer.parallelize.pp = 2`: rank 0 here, rank 1
spawned, gloo on CPU) against the single-process `Trainer` on the same batches: the same losses
and weights after each step in rank 0's full copy (what a checkpoint exports: every stage's
parameters under their plain names, the tied head once), a full state in the single-process
format that one process resumes from; sharded checkpoints that move between layouts (written at
pp=2, resumed at pp=2 and at dp=2 with the very tensors saved, written there, resumed at pp=2
again, each going on as the single-process trainer does, with an HF folder of the full model);
and per-shard publishing (pp=2 and dp=2), whose files an engine assembles into the trained weights."""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch

from test_fsdp import ALGO, ARCH, BATCHES, CFG
from tempering.config import ParallelizeConfig
from tempering.models import build_model
from tempering.tokenizer import char_tokenizer
from tempering.trainer import Trainer
from tempering.trainer.checkpoint import save_checkpoint
from tempering.trainer.group import TrainerGroup

TIMEOUT_S = 120
PP2 = dataclasses.replace(CFG, parallelize=ParallelizeConfig(pp=2))
DP2 = CFG  # dp_shard = -1: both ranks


@pytest.fixture(scope="module")
def oracle():
    """The single-process trainer's stats, weights and state after each of 3 steps."""
    model = build_model(ARCH, seed=0)
    trainer = Trainer(model, CFG, ALGO, total_steps=10)
    out = []
    for batch in BATCHES[:3]:
        stats = trainer.rl_step(batch)
        out.append((stats, copy.deepcopy(model.state_dict()), copy.deepcopy(trainer.state_dict())))
    return out


def _group(cfg, seed: int = 0) -> TrainerGroup:
    model = build_model(ARCH, seed=seed)
    return TrainerGroup(model, Trainer(model, cfg, ALGO, total_steps=10), 2, threads=1, timeout_s=TIMEOUT_S)


def _close(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor]) -> None:
    assert set(got) == set(want)
    for name, v in want.items():
        torch.testing.assert_close(got[name], v, atol=1e-5, rtol=1e-5, msg=name)


def _same_step(got, want) -> None:
    assert got.loss == pytest.approx(want.loss, abs=1e-5)
    assert got.grad_norm == pytest.approx(want.grad_norm, rel=1e-5)
    assert got.kl_ref == pytest.approx(want.kl_ref, abs=1e-6)


def test_a_pp_2_group_trains_as_one_process_and_its_state_resumes_in_one(oracle):
    group = _group(PP2)
    try:
        for i, batch in enumerate(BATCHES[:2]):
            stats = group.rl_step(batch)
            _same_step(stats, oracle[i][0])
            assert 0 < stats.pipeline_bubble < 1
            _close(group.model.state_dict(), oracle[i][1])  # rank 0's full copy: both stages' weights
        state = group.state_dict()
        model = copy.deepcopy(group.model)
    finally:
        group.close()
    want = oracle[1][2]
    assert state["scheduler"] == want["scheduler"]
    assert state["optimizer"]["param_groups"] == want["optimizer"]["param_groups"]
    assert set(state["optimizer"]["state"]) == set(want["optimizer"]["state"])  # the tied head's state once
    for i, s in want["optimizer"]["state"].items():
        _close(state["optimizer"]["state"][i], s)
    _close(state["reference"], want["reference"])
    resumed = Trainer(model, CFG, ALGO, total_steps=10)
    resumed.load_state_dict(state)
    _same_step(resumed.rl_step(BATCHES[2]), oracle[2][0])
    _close(model.state_dict(), oracle[2][1])


def _resume(cfg, folder, saved: dict, step: int, oracle, out=None):
    """A new group at `cfg` from another initialisation loads `folder` (exactly the `saved`
    tensors), trains step `step` as the oracle did, and writes a checkpoint into `out` when given.
    -> the checkpoint written and the weights it holds"""
    group = _group(cfg, seed=7)  # what the shards do not restore shows in the weights
    try:
        group.load(folder)
        for name, v in saved.items():
            assert torch.equal(group.model.state_dict()[name], v), name
        _same_step(group.rl_step(BATCHES[step - 1]), oracle[step - 1][0])
        _close(group.model.state_dict(), oracle[step - 1][1])
        if out is None:
            return None, None
        written = save_checkpoint(out, group.model, char_tokenizer("ab"), None, {"step": step}, shards=group.save)
        return written, copy.deepcopy(group.model.state_dict())
    finally:
        group.close()


def test_sharded_checkpoints_move_between_pp_2_and_dp_2(tmp_path, oracle):
    transformers = pytest.importorskip("transformers")
    group = _group(PP2)
    try:
        group.rl_step(BATCHES[0])
        first = save_checkpoint(tmp_path / "pp", group.model, char_tokenizer("ab"), None, {"step": 1},
                                shards=group.save)
        saved = copy.deepcopy(group.model.state_dict())
    finally:
        group.close()
    hf = transformers.LlamaForCausalLM.from_pretrained(first / "model").state_dict()
    _close({k: hf[k] for k in saved}, oracle[0][1])  # the full model, exported from both stages
    _resume(PP2, first, saved, 2, oracle)  # the stages resume as stages too
    second, saved = _resume(DP2, first, saved, 2, oracle, tmp_path / "dp")
    _resume(PP2, second, saved, 3, oracle)


@pytest.mark.parametrize("cfg", [PP2, DP2], ids=["pp2", "dp2"])
def test_ranks_publish_their_own_shards_and_an_engine_loads_the_trained_weights(tmp_path, oracle, cfg):
    """Given a weights folder, a step gathers nothing into rank 0's copy; every rank writes its own
    shards, and an engine assembles the single-process trainer's weights from them."""
    from tempering.engine import LLM
    from tempering.weights.layout import distinct
    from tempering.weights.shards import ShardSource

    model = build_model(ARCH, seed=0)
    group = TrainerGroup(model, Trainer(model, cfg, ALGO, total_steps=10), 2, threads=1, timeout_s=TIMEOUT_S,
                         weights=tmp_path / "weights")
    try:
        publisher = group.publisher()
        publisher.publish(model, 0)
        group.rl_step(BATCHES[0])
        _close(model.state_dict(), build_model(ARCH, seed=0).state_dict())  # not gathered: the start's
        publisher.publish(model, 1)
        group.refresh()
        trained = copy.deepcopy(model.state_dict())
    finally:
        group.close()
    engine = LLM(build_model(ARCH, seed=9), max_seq_len=32, version=-1)
    source = ShardSource(tmp_path / "weights")
    assert source.version == 1 and source.pull(engine) and engine.version == 1
    sent = [sum(p.tensor.nbytes for p in torch.load(tmp_path / "weights" / "v1" / f"rank{r}.pt", weights_only=False))
            for r in range(2)]
    one_copy = sum(t.nbytes for t in distinct(model.state_dict()).values())  # the tied head once
    assert sum(sent) == one_copy and max(sent) < one_copy  # each rank: its own shards only
    _close(engine.model.state_dict(), oracle[0][1])
    for name, v in trained.items():
        assert torch.equal(engine.model.state_dict()[name], v), name
