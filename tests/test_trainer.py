"""The trainer: micro-batches give the full-batch update for every objective and for GAE (critic
included); decoupled PPO's importance weights; the critic learns; checkpoints keep the critic and
the reference; schedules; SFT learns."""

import copy
import math

import pytest
import torch

from tempering.config import AlgorithmConfig, TrainerConfig
from tempering.models import Arch, build_model
from tempering.records import Batch
from tempering.trainer import Trainer, token_logprobs
from tempering.trainer.lr_schedule import lr_factor

ARCH = Arch(vocab_size=20, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
            num_key_value_heads=1)


def rl_batch(seed=0, rows=6, width=9):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 20, (rows, width), generator=g)
    lens = torch.randint(5, width + 1, (rows,), generator=g)
    mask = torch.zeros(rows, width)
    for i, n in enumerate(lens.tolist()):
        mask[i, 3:n] = 1
    adv = torch.randn(rows, 1, generator=g) * mask
    return Batch(input_ids=ids, loss_mask=mask, old_logprobs=-torch.rand(rows, width, generator=g) * mask,
                 advantages=adv, versions=torch.zeros(rows, width, dtype=torch.long), seq_lens=lens,
                 group_ids=torch.zeros(rows, dtype=torch.long), rewards=torch.rand(rows, generator=g), version=1)


def one_step(algo, micro, base, batch=None):
    model = copy.deepcopy(base)
    trainer = Trainer(model, TrainerConfig(lr=1e-2, micro_batch_tokens=micro), algo, norm_tokens=8)
    stats = trainer.rl_step(batch if batch is not None else rl_batch())
    return model, trainer, stats


@pytest.mark.parametrize("algo", [
    AlgorithmConfig(loss="ppo", aggregation="seq_sum_const"),
    AlgorithmConfig(loss="ppo", aggregation="token_mean", entropy_coef=0.01, kl_coef=0.1, kl_estimator="k1"),
    AlgorithmConfig(loss="gspo", aggregation="seq_mean_token_mean", gspo_clip_low=0.5, gspo_clip_high=0.5),
    AlgorithmConfig(loss="cispo", aggregation="token_mean"),
    AlgorithmConfig(loss="ppo", off_policy="decoupled", is_cap=1.5),
    AlgorithmConfig(advantage="gae", loss="ppo", aggregation="token_mean", lam=0.9, gamma=0.99),
], ids=["ppo", "ppo-entropy-kl", "gspo", "cispo", "decoupled", "gae"])
def test_micro_batches_give_the_full_batch_update(algo):
    base = build_model(ARCH, seed=1)
    runs = [one_step(algo, micro, base) for micro in (10_000, 9)]  # one micro-batch, then one row each
    (m0, t0, s0), (m1, t1, s1) = runs
    for k, v in m0.state_dict().items():
        torch.testing.assert_close(v, m1.state_dict()[k], atol=1e-6, rtol=1e-5)
    assert s0.loss == pytest.approx(s1.loss, abs=1e-6)
    assert (t0.critic is None) == (algo.advantage != "gae")
    if t0.critic is not None:
        for k, v in t0.critic.state_dict().items():
            torch.testing.assert_close(v, t1.critic.state_dict()[k], atol=1e-6, rtol=1e-5)
        assert s0.value_loss == pytest.approx(s1.value_loss, abs=1e-6) and s0.value_loss > 0
    # and the update did something
    assert any(not torch.equal(v, base.state_dict()[k]) for k, v in m0.state_dict().items())


def test_positive_advantage_raises_the_sampled_tokens_logprob():
    model = build_model(ARCH, seed=2)
    batch = rl_batch(seed=3)
    batch.advantages = batch.loss_mask.clone()  # every sampled token was good
    with torch.no_grad():
        before, _ = token_logprobs(model, batch.input_ids)
    batch.old_logprobs[:, 1:] = before * batch.loss_mask[:, 1:]
    Trainer(model, TrainerConfig(lr=1e-2), AlgorithmConfig(), norm_tokens=8).rl_step(batch)
    with torch.no_grad():
        after, _ = token_logprobs(model, batch.input_ids)
    m = batch.loss_mask[:, 1:].bool()
    assert (after[m] - before[m]).mean() > 0


def test_lr_schedules():
    warm = TrainerConfig(warmup_steps=4)
    assert [lr_factor(warm, s, 100) for s in range(5)] == [0.25, 0.5, 0.75, 1.0, 1.0]
    cos = TrainerConfig(warmup_steps=0, schedule="cosine", min_lr_ratio=0.1)
    assert lr_factor(cos, 0, 100) == pytest.approx(1.0)
    assert lr_factor(cos, 50, 100) == pytest.approx(0.55)
    assert lr_factor(cos, 100, 100) == pytest.approx(0.1)
    assert lr_factor(cos, 150, 100) == pytest.approx(0.1)


def test_sft_learns_a_fixed_mapping():
    from tempering.tokenizer import char_tokenizer
    from tempering.records import Task
    from tempering.trainer.sft import sft_batch

    tok = char_tokenizer("abc=")
    model = build_model(Arch(vocab_size=tok.vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                             num_attention_heads=2, num_key_value_heads=1), seed=0)
    tasks = [Task(id=str(i), domain="d", prompt=p, answer=a, reference=a)
             for i, (p, a) in enumerate([("a=", "b"), ("b=", "c"), ("c=", "a")])]
    batch = sft_batch(tok, tasks)
    assert batch.loss_mask.sum() == 6  # answer + eos for each
    trainer = Trainer(model, TrainerConfig(lr=1e-2))
    first = trainer.sft_step(batch).loss
    for _ in range(60):
        last = trainer.sft_step(batch).loss
    assert last < 0.1 * first


def test_latest_checkpoint_survives_a_torn_pointer_and_a_half_replaced_folder(tmp_path):
    # A kill can land between the steps of a save: the pointer must never send --resume to a
    # folder that is not a complete checkpoint, and a complete one must never be lost.
    from tempering.trainer.checkpoint import latest_checkpoint, point_latest

    root = tmp_path / "checkpoints"
    assert latest_checkpoint(tmp_path) is None
    for step in (2, 4):
        (root / f"step-{step:06d}").mkdir(parents=True)
        (root / f"step-{step:06d}" / "state.json").write_text("{}")
    (root / ".tmp-step-000006").mkdir()  # a save killed before its rename
    point_latest(root, "step-000002")
    assert (root / "latest").read_text() == "step-000002" and latest_checkpoint(tmp_path) == root / "step-000002"
    (root / "latest").write_text("")  # torn by a kill inside a plain write
    assert latest_checkpoint(tmp_path) == root / "step-000004"
    point_latest(root, "step-000008")  # names a folder removed before its replacement was renamed
    assert latest_checkpoint(tmp_path) == root / "step-000004"
    (root / "step-000004" / "state.json").unlink()  # incomplete folders are not checkpoints
    assert latest_checkpoint(tmp_path) == root / "step-000002"


def test_checkpoint_round_trip_restores_model_optimizer_and_rng(tmp_path):
    import random

    import numpy as np

    from tempering.tokenizer import char_tokenizer
    from tempering.trainer.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint

    model = build_model(ARCH, seed=4)
    trainer = Trainer(model, TrainerConfig(lr=1e-2), AlgorithmConfig(), norm_tokens=8)
    trainer.rl_step(rl_batch())
    random.seed(1), np.random.seed(1), torch.manual_seed(1)
    path = save_checkpoint(tmp_path, model, char_tokenizer("ab"), trainer.state_dict(), {"step": 7, "version": 7})
    expected = (random.random(), np.random.rand(), torch.rand(1).item())
    random.seed(2), np.random.seed(2), torch.manual_seed(2)  # what happens after the checkpoint is lost

    assert latest_checkpoint(tmp_path) == path and path.name == "step-000007"
    loaded, trainer_state, state = load_checkpoint(path)
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == expected
    assert state == {"step": 7, "version": 7}
    for k, v in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[k], v), k
    fresh = Trainer(loaded, TrainerConfig(lr=1e-2), AlgorithmConfig(), norm_tokens=8)
    fresh.load_state_dict(trainer_state)
    saved = trainer.optimizer.state_dict()["state"]
    for i, s in fresh.optimizer.state_dict()["state"].items():
        assert torch.equal(s["exp_avg"], saved[i]["exp_avg"]) and int(s["step"]) == 1


def test_kl_to_a_frozen_reference_starts_at_zero_and_grows():
    model = build_model(ARCH, seed=5)
    trainer = Trainer(model, TrainerConfig(lr=5e-2), AlgorithmConfig(kl_coef=0.5), norm_tokens=8)
    assert trainer.reference is None  # copied as RL starts, after any SFT warm-up
    first = trainer.rl_step(rl_batch(seed=6))
    second = trainer.rl_step(rl_batch(seed=6))
    assert first.kl_ref == pytest.approx(0.0, abs=1e-7)  # policy == reference before any update
    assert second.kl_ref > 1e-6  # the policy moved; the reference did not
    for p in trainer.reference.parameters():
        assert not p.requires_grad


def test_reference_and_critic_copy_the_policy_as_rl_starts_not_before_sft():
    model = build_model(ARCH, seed=7)
    trainer = Trainer(model, TrainerConfig(lr=1e-2), AlgorithmConfig(advantage="gae", kl_coef=0.1), norm_tokens=8)
    with torch.no_grad():
        model.lm_head.weight.add_(1.0)  # what an SFT warm-up does between set-up and RL
        model.model.norm.weight.add_(1.0)
    batch = rl_batch(seed=8)
    trainer.rl_step(batch)
    assert torch.equal(trainer.reference.model.norm.weight, trainer.critic.model.norm.weight)
    assert torch.all(trainer.reference.model.norm.weight == 2.0)


def hand_batch(weights, older):
    """One row: 2 prompt tokens, then one trained token per importance weight; the engine's
    logprobs are the model's minus log(w), so w = exp(trainer - engine) exactly. Tokens in
    `older` come from version 0, the others from the trainer's version 3."""
    n = len(weights)
    ids = torch.tensor([[1, 2] + [3 + i for i in range(n)]])
    mask = torch.tensor([[0.0, 0.0] + [1.0] * n])
    model = build_model(ARCH, seed=9)
    with torch.no_grad():
        logp, _ = token_logprobs(model, ids)
    old = torch.zeros(1, n + 2)
    old[0, 2:] = logp[0, 1:] - torch.log(torch.tensor(weights))
    versions = torch.full((1, n + 2), -1, dtype=torch.long)
    versions[0, 2:] = torch.tensor([0 if i in older else 3 for i in range(n)])
    batch = Batch(input_ids=ids, loss_mask=mask, old_logprobs=old, advantages=mask.clone(), versions=versions,
                  seq_lens=torch.tensor([n + 2]), group_ids=torch.zeros(1, dtype=torch.long),
                  rewards=torch.ones(1), version=3)
    return model, batch


def test_decoupled_ppo_truncates_importance_weights_and_reports_them():
    model, batch = hand_batch([0.5, 1.0, 2.0, 4.0], older={2, 3})
    algo = AlgorithmConfig(loss="ppo", aggregation="token_mean", off_policy="decoupled", is_cap=2.0)
    stats = Trainer(model, TrainerConfig(lr=1e-3), algo).rl_step(batch)
    # ratio to the proximal policy is 1, so each token's loss is -A x min(w, 2): -(0.5 + 1 + 2 + 2) / 4
    assert stats.loss == pytest.approx(-1.375, abs=1e-5)
    assert stats.clip_fraction == 0.0
    assert stats.is_weight_mean == pytest.approx(1.875, abs=1e-5)  # (0.5 + 1 + 2 + 4) / 4
    assert stats.is_weight_p50 == pytest.approx(1.5, abs=1e-5)  # between 1 and 2
    assert stats.is_weight_p90 == pytest.approx(3.4, abs=1e-5)  # 2 + 0.7 x (4 - 2)
    assert stats.is_weight_p99 == pytest.approx(3.94, abs=1e-5)
    assert stats.is_weight_max == pytest.approx(4.0, abs=1e-5)
    assert stats.is_truncated == pytest.approx(0.25)  # only 4 exceeds the cap
    # |log w|: ln 2, 0 on the current version's tokens; ln 2, 2 ln 2 on older ones
    assert stats.logp_gap_current == pytest.approx(math.log(2) / 2, abs=1e-5)
    assert stats.logp_gap_older == pytest.approx(1.5 * math.log(2), abs=1e-5)
    assert stats.current_fraction == 0.5


def test_behaviour_ratio_is_clipped_instead():
    model, batch = hand_batch([0.5, 1.0, 2.0, 4.0], older=set())
    stats = Trainer(model, TrainerConfig(lr=1e-3), AlgorithmConfig(aggregation="token_mean")).rl_step(batch)
    # ratio = w against the engine: min(w, 1.28) for A = 1 -> -(0.5 + 1 + 1.28 + 1.28) / 4
    assert stats.loss == pytest.approx(-1.015, abs=1e-5)
    assert stats.clip_fraction == pytest.approx(0.75)  # 0.5 < 0.8, 2 and 4 > 1.28
    assert stats.is_truncated == 0.0 and stats.current_fraction == 1.0
    assert math.isnan(stats.logp_gap_older)  # no older tokens: left out of the metrics


def test_entropy_bonus_is_subtracted_with_the_same_weights():
    base, batch = build_model(ARCH, seed=10), rl_batch(seed=11)
    plain = one_step(AlgorithmConfig(aggregation="token_mean"), 10_000, base, batch)[2]
    bonus = one_step(AlgorithmConfig(aggregation="token_mean", entropy_coef=0.1), 10_000, base, batch)[2]
    assert bonus.entropy == pytest.approx(plain.entropy)
    assert bonus.loss == pytest.approx(plain.loss - 0.1 * plain.entropy, abs=1e-6)


def test_the_critic_learns_the_returns_of_a_fixed_batch():
    model = build_model(ARCH, seed=12)
    algo = AlgorithmConfig(advantage="gae", aggregation="token_mean", gamma=1.0, lam=1.0, value_lr=3e-2)
    trainer = Trainer(model, TrainerConfig(lr=1e-4), algo)
    batch = rl_batch(seed=13)
    losses = [trainer.rl_step(batch).value_loss for _ in range(30)]
    assert losses[0] > 0 and losses[-1] < 0.1 * losses[0]


def test_checkpoint_round_trip_restores_the_critic_and_the_reference(tmp_path):
    from tempering.tokenizer import char_tokenizer
    from tempering.trainer.checkpoint import load_checkpoint, save_checkpoint

    algo = AlgorithmConfig(advantage="gae", kl_coef=0.1, aggregation="token_mean")
    model = build_model(ARCH, seed=14)
    trainer = Trainer(model, TrainerConfig(lr=1e-2), algo, norm_tokens=8)
    trainer.rl_step(rl_batch(seed=15))
    path = save_checkpoint(tmp_path, model, char_tokenizer("ab"), trainer.state_dict(), {"step": 1, "version": 1})
    loaded, trainer_state, _ = load_checkpoint(path)
    fresh = Trainer(loaded, TrainerConfig(lr=1e-2), algo, norm_tokens=8)
    fresh.load_state_dict(trainer_state)
    for k, v in trainer.critic.state_dict().items():
        assert torch.equal(fresh.critic.state_dict()[k], v), k
    for k, v in trainer.reference.state_dict().items():
        assert torch.equal(fresh.reference.state_dict()[k], v), k
    # the next step is the same step: critic optimizer state and the reference came back
    a, b = trainer.rl_step(rl_batch(seed=16)), fresh.rl_step(rl_batch(seed=16))
    assert (a.loss, a.value_loss, a.kl_ref) == pytest.approx((b.loss, b.value_loss, b.kl_ref), abs=1e-6)
    for k, v in trainer.critic.state_dict().items():
        torch.testing.assert_close(fresh.critic.state_dict()[k], v)
