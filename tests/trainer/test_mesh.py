"""The trainer on a device mesh (gloo on CPU, a tiny decoder): tensor parallel on 2 ranks, and
tensor x data parallel on 4, give the single-process trainer's losses and weights after 2 RL
steps; a checkpoint written at tp=2 resumes at dp=2 and in one process with the very tensors it
saved, and goes on as the single-process trainer does; the tp run exports a full HF folder.

The oracle is `Trainer` in this process on the same batches (`test_fsdp`'s model, algorithm and
batches: decoupled PPO over 2 mini-batches, a reference, an entropy bonus, a clipped norm).
"""

from __future__ import annotations

import copy
import dataclasses
import math
from pathlib import Path

import pytest
import torch

from test_fsdp import ALGO, ARCH, BATCHES, CFG, _full_weights, _spawn
from tempering.config import ConfigError, ParallelizeConfig
from tempering.models import build_model
from tempering.trainer import Trainer
from tempering.trainer.mesh import mesh_shape

STEPS = 2
TP2 = ParallelizeConfig(tp=2)
TP2_DP2 = ParallelizeConfig(tp=2, dp_shard=2)


def _stats(stats) -> list[dict]:
    return [dataclasses.asdict(s) for s in stats]


# ---- what each rank runs (module-level: spawned processes import it by name) ----

def _train(ranks, out: Path) -> None:
    from tempering.tokenizer import char_tokenizer
    from tempering.trainer.distributed import export_hf, sharded_trainer, train

    trainer = sharded_trainer(build_model(ARCH, seed=1), ranks, CFG, ALGO, norm_tokens=8)
    stats = train(trainer, BATCHES[:STEPS], out / "run", save_every=STEPS)
    export_hf(trainer.model, out / "hf", char_tokenizer("ab"))
    torch.save({"stats": _stats(stats), "weights": _full_weights(trainer.model)}, out / f"train{ranks.rank}.pt")


def _resume(ranks, out: Path) -> None:
    from tempering.trainer.checkpoint import latest_checkpoint
    from tempering.trainer.distributed import load_sharded, sharded_trainer, train

    trainer = sharded_trainer(build_model(ARCH, seed=7), ranks, CFG, ALGO, norm_tokens=8)
    state = load_sharded(latest_checkpoint(out / "run"), trainer)
    loaded = _full_weights(trainer.model)
    stats = train(trainer, BATCHES[state["step"]:], out / "resumed", start_step=state["step"])
    torch.save({"stats": _stats(stats), "loaded": loaded, "weights": _full_weights(trainer.model)},
               out / f"resume{ranks.rank}.pt")


# ---- the test process ----

@pytest.fixture(scope="module")
def oracle():
    """The single-process trainer: its stats and weights after each step."""
    model = build_model(ARCH, seed=1)
    trainer = Trainer(model, CFG, ALGO, norm_tokens=8)
    stats, weights = [], []
    for batch in BATCHES:
        stats.append(trainer.rl_step(batch))
        weights.append(copy.deepcopy(model.state_dict()))
    return stats, weights


@pytest.fixture(scope="module")
def tp_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("tp")
    _spawn(_train, out, 2, TP2)
    return out


def _close(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == pytest.approx(b, abs=1e-5, rel=1e-5)


def _same_as_oracle(got: dict, oracle, first: int = 0, with_weights: bool = True) -> None:
    """`got`'s stats (steps `first` + 1, ...) and, when asked, its final weights are the oracle's."""
    stats, weights = oracle
    for i, s in enumerate(got["stats"]):
        want = dataclasses.asdict(stats[first + i])
        mismatched = {k: (v, want[k]) for k, v in s.items() if not _close(v, want[k])}
        assert not mismatched, f"step {first + i + 1}: {mismatched}"
    if not with_weights:
        return
    final = weights[first + len(got["stats"]) - 1]
    assert set(got["weights"]) == set(final)
    for name, v in got["weights"].items():
        torch.testing.assert_close(v, final[name], atol=1e-5, rtol=1e-5, msg=name)


def test_tensor_parallel_gives_the_single_process_losses_and_weights(tp_run, oracle):
    for rank in range(2):  # every rank reports the whole batch's stats; rank 0 gathers the weights
        _same_as_oracle(torch.load(tp_run / f"train{rank}.pt"), oracle, with_weights=rank == 0)
    assert oracle[0][1].grad_norm > CFG.grad_clip and oracle[0][1].kl_ref > 0  # clipped, and a reference


def test_tensor_x_data_parallel_on_4_ranks(tmp_path, oracle):
    _spawn(_train, tmp_path, 4, TP2_DP2)
    for rank in range(4):
        _same_as_oracle(torch.load(tmp_path / f"train{rank}.pt"), oracle, with_weights=rank == 0)


def test_a_tp_checkpoint_resumes_at_dp_2_and_in_one_process(tp_run, oracle):
    from tempering.trainer.checkpoint import latest_checkpoint
    from tempering.trainer.distributed import load_sharded

    saved = torch.load(tp_run / "train0.pt")["weights"]
    _spawn(_resume, tp_run, 2, ParallelizeConfig(dp_shard=2))
    resumed = torch.load(tp_run / "resume0.pt")
    for name, v in saved.items():
        assert torch.equal(resumed["loaded"][name], v), name
    _same_as_oracle(resumed, oracle, first=STEPS)

    model = build_model(ARCH, seed=7)
    trainer = Trainer(model, CFG, ALGO, norm_tokens=8)
    state = load_sharded(latest_checkpoint(tp_run / "run"), trainer)
    for name, v in saved.items():
        assert torch.equal(model.state_dict()[name], v), name
    stats = [trainer.rl_step(b) for b in BATCHES[state["step"]:]]
    _same_as_oracle({"stats": _stats(stats), "weights": model.state_dict()}, oracle, first=STEPS)


def test_the_tp_run_exports_a_full_hf_folder(tp_run, oracle):
    transformers = pytest.importorskip("transformers")
    hf = transformers.AutoModelForCausalLM.from_pretrained(tp_run / "hf").eval()
    want = build_model(ARCH)
    want.load_state_dict(oracle[1][STEPS - 1])
    ids = BATCHES[0].input_ids
    with torch.no_grad():
        torch.testing.assert_close(hf(ids).logits, want(ids), atol=1e-5, rtol=1e-5)


def test_a_layout_whose_product_is_not_the_ranks_names_the_keys():
    assert str(mesh_shape(ParallelizeConfig(tp=2), 8)) == "pp=1 x dp_replicate=1 x dp_shard=4 x tp=2"
    assert mesh_shape(ParallelizeConfig(dp_replicate=2, dp_shard=2), 4).dp == 4
    with pytest.raises(ConfigError, match=r"dp_replicate \(1\) x dp_shard \(-1\) x tp \(4\) x pp \(1\) must equal "
                                          r"runtime.trainer_ranks \(6\)"):
        mesh_shape(ParallelizeConfig(tp=4), 6)
    with pytest.raises(ConfigError, match="trainer_ranks"):
        mesh_shape(ParallelizeConfig(tp=2, dp_shard=2), 2)
    with pytest.raises(ConfigError, match="pp = 2 with tp = 2: pipeline parallel is not combined with tensor parallel"):
        mesh_shape(ParallelizeConfig(pp=2, tp=2), 4)
