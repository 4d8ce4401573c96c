"""Pipeline x data parallel on gloo (CPU, a tiny decoder, 4 ranks): pp = 2 stages, each sharded
with FSDP2 over dp_shard = 2 ranks, or replicated over dp_replicate = 2, give the single-process
trainer's stats and weights after 2 RL steps within 1e-5; the pp x dp_shard run's sharded
checkpoint resumes at dp_shard = 2 with exactly the saved tensors and goes on as the oracle, and
its exported HF folder is the trained model. The run's trainer group refuses pp x dp.

The oracle is `Trainer` in this process on the same batches (`test_fsdp`'s model, algorithm and
batches: decoupled PPO over 2 mini-batches, so a proximal pass, a reference, an entropy bonus, a
clipped norm and a tied head whose two copies, first and last stage, are each sharded).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
from torch.distributed.tensor import DTensor

from test_fsdp import ALGO, ARCH, BATCHES, CFG, _spawn
from test_mesh import _close, _resume, _same_as_oracle, oracle  # noqa: F401 (a fixture)
from tempering.config import ConfigError, ParallelizeConfig
from tempering.models import build_model, load_hf
from tempering.trainer import Trainer

STEPS = 2
PP2_DP2 = ParallelizeConfig(pp=2, dp_shard=2)


def _stats(stats) -> list[dict]:
    return [{k: v for k, v in dataclasses.asdict(s).items() if k != "pipeline_bubble"} for s in stats]


# ---- what each rank runs (module-level: spawned processes import it by name) ----

def _train(ranks, out: Path) -> None:
    from tempering.trainer.distributed import export_hf, sharded_trainer, train
    from tempering.trainer.stage_state import stage_tensors

    trainer = sharded_trainer(build_model(ARCH, seed=1), ranks, CFG, ALGO, norm_tokens=8)
    stats = train(trainer, BATCHES[:STEPS], out / "run", save_every=STEPS)
    sharded = all(isinstance(p, DTensor) for p in trainer.model.parameters())
    weights = stage_tensors(trainer.model)  # this stage's, gathered over its data-parallel ranks
    export_hf(trainer.model, out / "hf", ranks=ranks)
    torch.save({"stats": _stats(stats), "weights": weights, "sharded": sharded}, out / f"train{ranks.rank}.pt")


# ---- the test process ----

@pytest.fixture(scope="module")
def fsdp_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("ppdp")
    _spawn(_train, out, 4, PP2_DP2)
    return out


def _merged(out: Path, world: int) -> dict:
    """Rank 0's stats (every rank's the same), the stages' weights in one state dict (every data-
    parallel rank of a stage holding the same full tensors)."""
    runs = [torch.load(out / f"train{r}.pt") for r in range(world)]
    weights: dict[str, torch.Tensor] = {}
    for run in runs:
        assert run["sharded"]
        for name, v in run["weights"].items():
            if name in weights:  # another data-parallel rank of the stage
                assert torch.equal(weights[name], v), name
            weights[name] = v
        for theirs, mine in zip(run["stats"], runs[0]["stats"], strict=True):
            assert all(_close(v, mine[k]) for k, v in theirs.items())
    weights["lm_head.weight"] = weights["model.embed_tokens.weight"]  # tied
    return {"stats": runs[0]["stats"], "weights": weights}


def test_pp_2_x_fsdp_2_gives_the_single_process_losses_and_weights(fsdp_run, oracle):
    got = _merged(fsdp_run, 4)
    _same_as_oracle(got, oracle)
    assert oracle[0][0].grad_norm > CFG.grad_clip and oracle[0][0].kl_ref > 0  # clipped, and a reference
    exported = load_hf(fsdp_run / "hf").state_dict()
    for name, v in got["weights"].items():
        assert torch.equal(exported[name], v), name


def test_pp_2_x_replicas_2_gives_the_single_process_losses_and_weights(tmp_path, oracle):
    _spawn(_train, tmp_path, 4, ParallelizeConfig(pp=2, dp_replicate=2))
    _same_as_oracle(_merged(tmp_path, 4), oracle)


def test_a_pp_x_dp_checkpoint_resumes_at_dp_2(fsdp_run, oracle):
    saved = _merged(fsdp_run, 4)["weights"]
    _spawn(_resume, fsdp_run, 2, ParallelizeConfig(dp_shard=2))
    resumed = torch.load(fsdp_run / "resume0.pt")
    assert set(resumed["loaded"]) == set(saved)
    for name, v in saved.items():
        assert torch.equal(resumed["loaded"][name], v), name
    _same_as_oracle(resumed, oracle, first=STEPS)


def test_the_run_s_trainer_group_refuses_pp_x_dp():
    from tempering.config import TrainerConfig
    from tempering.trainer.group import TrainerGroup

    trainer = Trainer(build_model(ARCH, seed=1), TrainerConfig(parallelize=PP2_DP2), ALGO)
    with pytest.raises(ConfigError, match="trainer group does not combine pp with data parallel"):
        TrainerGroup(trainer.model, trainer, 4, threads=1, timeout_s=10)
