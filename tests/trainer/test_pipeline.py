"""Pipeline parallel on gloo (CPU, a tiny decoder): pp = 2 stages on 1F1B, and 2 ranks x 2
looped stages on interleaved 1F1B, give the single-process trainer's stats and weights after 2 RL
steps; each step reports the schedule's bubble, which is the formula's for (interleaved) 1F1B.

The oracle is `Trainer` in this process on the same batches (`test_fsdp`'s model, algorithm and
batches: decoupled PPO over 2 mini-batches, so a proximal pass, a reference, an entropy bonus, a
clipped norm and a tied head, whose two copies on the first and last stage must stay one).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
from torch.distributed.pipelining.schedules import _Action, _ComputationType

from test_fsdp import ALGO, ARCH, BATCHES, CFG, _spawn
from test_mesh import _close, _same_as_oracle
from tempering.config import ConfigError, ParallelizeConfig
from tempering.errors import UserError
from tempering.models import build_model, load_hf
from tempering.trainer import Trainer
from tempering.trainer.mesh import mesh_shape
from tempering.trainer.pipeline import bubble_fraction, cut_stage, stage_layers
from tempering.trainer.micro_batch import mini_batches
from tempering.trainer.pipeline_step import pipeline_rows

STEPS = 2
DEEP = dataclasses.replace(ARCH, num_hidden_layers=4)  # 4 stages for interleaving


# ---- what each rank runs (module-level: spawned processes import it by name) ----

def _train(arch, ranks, out: Path) -> None:
    from tempering.trainer.distributed import export_hf, sharded_trainer, train

    trainer = sharded_trainer(build_model(arch, seed=1), ranks, CFG, ALGO, norm_tokens=8)
    stats = train(trainer, BATCHES[:STEPS], out / "run")
    export_hf(trainer.model, out / "hf", ranks=ranks)  # every stage's weights, written by rank 0
    try:
        trainer.sft_step(BATCHES[0])
        refused = ""
    except UserError as e:
        refused = str(e)
    torch.save({"stats": [dataclasses.asdict(s) for s in stats], "weights": trainer.model.state_dict(),
                "sft": refused}, out / f"train{ranks.rank}.pt")


def _train_shallow(ranks, out: Path) -> None:
    _train(ARCH, ranks, out)


def _train_deep(ranks, out: Path) -> None:
    _train(DEEP, ranks, out)


# ---- the test process ----

def _oracle(arch):
    model = build_model(arch, seed=1)
    trainer = Trainer(model, CFG, ALGO, norm_tokens=8)
    stats, weights = [], []
    for batch in BATCHES[:STEPS]:
        stats.append(trainer.rl_step(batch))
        weights.append({k: v.clone() for k, v in model.state_dict().items()})
    return stats, weights


def _merged(out: Path, world: int) -> dict:
    """Rank 0's stats, every stage's weights in one state dict, and the bubbles every rank reported."""
    runs = [torch.load(out / f"train{r}.pt") for r in range(world)]
    bubbles = [[s.pop("pipeline_bubble") for s in run["stats"]] for run in runs]
    assert all("SFT steps (the warm-up) are not pipelined yet" in run["sft"] for run in runs)
    weights: dict[str, torch.Tensor] = {}
    for run in runs:
        assert not set(weights) & set(run["weights"]), "a parameter on two stages"
        weights.update(run["weights"])
    for run in runs[1:]:  # every rank reports the step's stats
        for theirs, mine in zip(run["stats"], runs[0]["stats"], strict=True):
            assert all(_close(v, mine[k]) for k, v in theirs.items())
    return {"stats": runs[0]["stats"], "weights": weights, "bubbles": bubbles}


def _bubble(pp: int, per_rank: int) -> float:
    """Megatron's (interleaved) 1F1B bubble for the last optimizer step's micro-batches."""
    part = mini_batches(BATCHES[STEPS - 1], ALGO.mini_batches)[-1]
    m = pipeline_rows(BATCHES[STEPS - 1], part, CFG.micro_batch_tokens, pp).microbatches
    return (pp - 1) / (per_rank * m + pp - 1)


@pytest.mark.parametrize("arch, work, per_rank", [(ARCH, _train_shallow, 1), (DEEP, _train_deep, 2)],
                         ids=["1f1b", "interleaved"])
def test_pp_2_gives_the_single_process_losses_and_weights(tmp_path, arch, work, per_rank):
    oracle = _oracle(arch)
    _spawn(work, tmp_path, 2, ParallelizeConfig(pp=2, pp_stages_per_rank=per_rank))
    got = _merged(tmp_path, 2)
    _same_as_oracle(got, oracle)
    exported = load_hf(tmp_path / "hf").state_dict()
    assert set(exported) == set(oracle[1][-1])
    for name, v in got["weights"].items():
        assert torch.equal(exported[name], v), name
    assert oracle[0][0].grad_norm > CFG.grad_clip and oracle[0][0].kl_ref > 0  # clipped, and a reference
    want = _bubble(2, per_rank)
    assert 0 < want < 0.5
    for bubbles in got["bubbles"]:
        assert bubbles[-1] == pytest.approx(want)


def test_the_model_is_cut_by_layer_and_keeps_its_names():
    assert [list(stage_layers(5, 2, s)) for s in range(2)] == [[0, 1, 2], [3, 4]]
    assert [list(stage_layers(4, 4, s)) for s in range(4)] == [[0], [1], [2], [3]]
    first, last = cut_stage(build_model(DEEP, seed=1), 0, 2), cut_stage(build_model(DEEP, seed=1), 1, 2)
    assert {k.split(".")[2] for k in first.state_dict() if ".layers." in k} == {"0", "1"}
    assert {k.split(".")[2] for k in last.state_dict() if ".layers." in k} == {"2", "3"}
    assert "model.embed_tokens.weight" in first.state_dict() and "lm_head.weight" not in first.state_dict()
    assert "lm_head.weight" in last.state_dict() and "model.embed_tokens.weight" not in last.state_dict()
    looped = cut_stage(build_model(DEEP, seed=1), 0, 2, per_rank=2)  # stages 0 and 2 of 4
    assert {k.split(".")[2] for k in looped.state_dict() if ".layers." in k} == {"0", "2"}
    with pytest.raises(UserError, match="4 pipeline stages .* need at least 4 layers; the model has 2"):
        cut_stage(build_model(ARCH), 0, 2, per_rank=2)


def test_the_bubble_of_a_hand_run_1f1b():
    """pp 2, 2 micro-batches, forward 1 and backward 2 units. Rank 0: F0 [0,1], F1 [1,2], B0 after
    rank 1's [4,6], B1 [7,9]; rank 1: F0 [1,2], B0 [2,4], F1 [4,5], B1 [5,7]. 9 units each, 6
    busy: a third idle, (pp - 1) / (m + pp - 1)."""
    f, b = _ComputationType.FORWARD, _ComputationType.FULL_BACKWARD
    order = {0: [_Action(0, f, 0), _Action(0, f, 1), None, _Action(0, b, 0), _Action(0, b, 1)],
             1: [None, _Action(1, f, 0), _Action(1, b, 0), _Action(1, f, 1), _Action(1, b, 1)]}
    assert bubble_fraction(order) == pytest.approx(1 / 3)
    assert bubble_fraction({0: [_Action(0, f, 0), _Action(0, b, 0)]}) == 0.0  # one stage: no bubble
    with pytest.raises(ValueError, match="wait on each other"):  # a backward before its forward
        bubble_fraction({0: [_Action(0, b, 0), _Action(0, f, 0)]})


def test_micro_batches_have_one_shape_and_a_multiple_of_the_stages():
    batch = BATCHES[0]
    rows = torch.arange(5)
    lay = pipeline_rows(batch, rows, tokens=8, pp=2)
    assert lay.microbatches % 2 == 0 and lay.ids.shape[0] % lay.microbatches == 0
    assert lay.ids.shape[1] == int(batch.seq_lens[rows].max())
    assert lay.index[lay.live].tolist() == rows.tolist() and int(lay.live.sum()) == 5


def test_unsupported_layouts_say_so():
    assert str(mesh_shape(ParallelizeConfig(pp=2), 2)) == "pp=2 x dp_replicate=1 x dp_shard=1 x tp=1"
    with pytest.raises(ConfigError, match="pp = 2 with tp = 2: pipeline parallel is not combined with tensor "):
        mesh_shape(ParallelizeConfig(pp=2, tp=2), 4)
    assert mesh_shape(ParallelizeConfig(pp=2), 4).dp_shard == 2  # dp_shard = -1 takes the rest
