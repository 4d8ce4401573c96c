"""The FSDP2 trainer on 2 CPU ranks (gloo): the same losses and weights as the single-process
trainer on the same batches, an exported HF folder that transformers loads with the same logits,
and a resume from a sharded checkpoint that continues exactly.

One spawn runs an SFT step (as the warm-up does; the reference is copied after it), then 3 RL
steps (checkpointing after the 2nd), and exports; a second, in fresh processes from a differently
initialised model, restores the step-2 checkpoint and trains the 3rd step. The oracle is
`Trainer` in this process on the same batches.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import socket
import time
import traceback
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp

from tempering.buffer import pack
from tempering.config import AlgorithmConfig, ParallelizeConfig, TrainerConfig
from tempering.models import Arch, build_model
from tempering.records import Trajectory
from tempering.trainer import Trainer

VOCAB = 32
ARCH = Arch(vocab_size=VOCAB, hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, tie_word_embeddings=True)
# token_mean: a rank normalising over its own tokens would train another loss; decoupled PPO over
# 2 mini-batches: the proximal pass and two optimizer steps per batch; a reference (kl) and an
# entropy bonus; a clip the gradient norm exceeds; warm-up, so the LR differs at every step
ALGO = AlgorithmConfig(loss="ppo", aggregation="token_mean", off_policy="decoupled", is_cap=2.0, mini_batches=2,
                       kl_coef=0.1, entropy_coef=0.01)
CFG = TrainerConfig(lr=1e-2, weight_decay=0.01, grad_clip=0.1, micro_batch_tokens=8, warmup_steps=4)
STEPS = 3
DEADLINE_S = 180  # for each spawn; a hang (a collective one rank never joins) ends here, not in CI's timeout


def rl_batch(seed: int):
    """Five groups: one behind a 30-token prompt, four behind 4-token prompts, so the ranks'
    shares are alike in tokens but not in passes: with `micro_batch_tokens` 8 every group is a
    pass of its own, one rank takes the long group alone and the other several short ones."""
    g = torch.Generator().manual_seed(seed)
    rows = []
    for group, (prompt_len, n) in enumerate([(30, 3), (4, 2), (4, 2), (4, 2), (4, 2)]):
        prompt = torch.randint(3, VOCAB, (prompt_len,), generator=g).tolist()
        for _ in range(n):
            k = int(torch.randint(2, 6, (1,), generator=g))
            t = Trajectory(task_id=f"t{group}", domain="d", sample_index=0, prompt_ids=prompt,
                           token_ids=torch.randint(3, VOCAB, (k,), generator=g).tolist(),
                           logprobs=(-3 * torch.rand(k, generator=g)).tolist(), loss_mask=[1] * k,
                           versions=torch.randint(seed, seed + 2, (k,), generator=g).tolist(), text="",
                           finish_reason="stop")
            rows.append((t, float(torch.randn(1, generator=g)), group))
    return pack(rows, pad_id=0, version=seed + 1)


BATCHES = [rl_batch(seed) for seed in range(STEPS)]


# ---- what each rank runs (module-level: spawned processes import it by name) ----

def _rank_main(work, rank: int, world: int, port: int, out: Path, parallelize: ParallelizeConfig) -> None:
    import torch.distributed as dist

    from tempering.trainer.distributed import init_ranks

    torch.set_num_threads(1)
    try:
        ranks = init_ranks(backend="gloo", address=f"127.0.0.1:{port}", rank=rank, world=world, timeout_s=60,
                           parallelize=parallelize)
        work(ranks, out)
    except BaseException:
        (out / f"rank{rank}.err").write_text(traceback.format_exc())
        raise
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def _full_weights(model) -> dict[str, torch.Tensor]:
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def _train(ranks, out: Path) -> None:
    from torch.distributed.tensor import DTensor

    from tempering.tokenizer import char_tokenizer
    from tempering.trainer.distributed import export_hf, sharded_trainer, train

    trainer = sharded_trainer(build_model(ARCH, seed=1), ranks, CFG, ALGO, norm_tokens=8)
    passes = [len(trainer._micro_batches(b)) for b in BATCHES]
    sft = trainer.sft_step(BATCHES[0])
    stats = train(trainer, BATCHES, out / "run", save_every=2)
    export_hf(trainer.model, out / "hf", char_tokenizer("ab"))
    weights = _full_weights(trainer.model)
    reference_sharded = all(isinstance(p, DTensor) and p.to_local().shape[0] < p.shape[0]
                            for p in trainer.reference.parameters())
    torch.save({"stats": [dataclasses.asdict(s) for s in [sft, *stats]], "weights": weights, "passes": passes,
                "tied": trainer.model.lm_head.weight is trainer.model.model.embed_tokens.weight,
                "reference_sharded": reference_sharded}, out / f"train{ranks.rank}.pt")


def _resume(ranks, out: Path) -> None:
    from tempering.trainer.checkpoint import latest_checkpoint
    from tempering.trainer.distributed import load_sharded, sharded_trainer, train

    # another init: whatever the checkpoint does not restore shows in the weights
    trainer = sharded_trainer(build_model(ARCH, seed=7), ranks, CFG, ALGO, norm_tokens=8)
    path = latest_checkpoint(out / "run")
    state = load_sharded(path, trainer)
    stats = train(trainer, BATCHES[state["step"]:], out / "run", start_step=state["step"])
    torch.save({"stats": [dataclasses.asdict(s) for s in stats], "weights": _full_weights(trainer.model),
                "state": state, "path": path.name}, out / f"resume{ranks.rank}.pt")


# ---- the test process ----

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _spawn(work, out: Path, world: int = 2, parallelize: ParallelizeConfig = ParallelizeConfig()) -> None:
    """`work(ranks, out)` on `world` spawned ranks laid out as `parallelize`; a rank's error fails the test."""
    ctx = mp.get_context("spawn")
    port = _free_port()
    procs = [ctx.Process(target=_rank_main, args=(work, rank, world, port, out, parallelize)) for rank in range(world)]
    for p in procs:
        p.start()
    end = time.monotonic() + DEADLINE_S
    for p in procs:
        p.join(max(0.0, end - time.monotonic()))
    hung = [rank for rank, p in enumerate(procs) if p.is_alive()]
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join(10)
    errors = "".join(f"\n--- rank {r} ---\n{(out / f'rank{r}.err').read_text()}"
                     for r in range(world) if (out / f"rank{r}.err").exists())
    if hung or any(p.exitcode != 0 for p in procs) or errors:
        pytest.fail(f"{work.__name__} on {world} ranks: still running after {DEADLINE_S}s: {hung}; "
                    f"exit codes {[p.exitcode for p in procs]}{errors}")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    out = tmp_path_factory.mktemp("fsdp")
    _spawn(_train, out)
    _spawn(_resume, out)
    return out


@pytest.fixture(scope="module")
def oracle():
    """The single-process trainer on the same batches: its stats and model after each step."""
    model = build_model(ARCH, seed=1)
    trainer = Trainer(model, CFG, ALGO, norm_tokens=8)
    stats, models = [trainer.sft_step(BATCHES[0])], []
    for batch in BATCHES:
        stats.append(trainer.rl_step(batch))
        models.append(copy.deepcopy(model))
    return stats, models


def _close(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == pytest.approx(b, abs=1e-5, rel=1e-5)


def test_two_ranks_give_the_single_process_losses_and_weights(runs, oracle):
    stats, models = oracle
    got = [torch.load(runs / f"train{r}.pt") for r in range(2)]
    # the ranks ran different numbers of their own passes (the padding passes evened them out)
    assert got[0]["passes"] != got[1]["passes"]
    assert got[0]["tied"] and got[1]["tied"] and got[0]["reference_sharded"] and got[1]["reference_sharded"]
    for step, want in enumerate(stats):  # the SFT step, then the RL steps
        w = dataclasses.asdict(want)
        for r in range(2):  # every rank reports the whole batch's stats
            mismatched = {k: (v, w[k]) for k, v in got[r]["stats"][step].items() if not _close(v, w[k])}
            assert not mismatched, f"step {step}, rank {r}: {mismatched}"
    assert all(s.grad_norm > CFG.grad_clip for s in stats) and stats[-1].kl_ref > 0  # clipped, and a reference
    final = models[-1].state_dict()
    for name, v in got[0]["weights"].items():
        torch.testing.assert_close(v, final[name], atol=1e-6, rtol=1e-5, msg=name)
    assert not torch.allclose(final["model.norm.weight"], build_model(ARCH, seed=1).model.norm.weight)


def test_exported_folder_loads_in_transformers_with_the_same_logits(runs, oracle):
    transformers = pytest.importorskip("transformers")
    hf = transformers.AutoModelForCausalLM.from_pretrained(runs / "hf").eval()
    assert transformers.AutoTokenizer.from_pretrained(runs / "hf").convert_tokens_to_ids("b") is not None
    ids = BATCHES[0].input_ids
    with torch.no_grad():
        torch.testing.assert_close(hf(ids).logits, oracle[1][-1](ids), atol=1e-5, rtol=1e-5)


def test_resume_from_a_sharded_checkpoint_continues_exactly(runs):
    trained = torch.load(runs / "train0.pt")
    resumed = torch.load(runs / "resume0.pt")
    assert resumed["path"] == "step-000002" and resumed["state"] == {"step": 2}
    (want,), (got,) = trained["stats"][3:], resumed["stats"]  # [SFT, RL 1, RL 2, RL 3]
    assert {k for k, v in got.items() if not (v == want[k] or math.isnan(v) and math.isnan(want[k]))} == set()
    for name, v in trained["weights"].items():
        assert torch.equal(resumed["weights"][name], v), name


def test_gae_is_refused_under_fsdp_and_cpu_stays_fp32():
    from tempering.errors import UserError
    from tempering.trainer.parallelize import Ranks, mixed_precision

    mp_policy = mixed_precision(torch.device("cpu"))
    assert mp_policy.param_dtype is None and mp_policy.reduce_dtype is None  # fp32 throughout
    with pytest.raises(UserError, match="gae.*not supported by the FSDP trainer"):
        Trainer(build_model(ARCH), CFG, AlgorithmConfig(advantage="gae"), ranks=Ranks(None, mp_policy))
