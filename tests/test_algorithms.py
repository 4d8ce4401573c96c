"""Advantages, objectives, aggregations, KL estimators, reward shaping and GAE on tiny examples
computed by hand (the expected numbers are written out, never recomputed by the same formula)."""

import math
import typing

import pytest
import torch

from tempering.algorithms import (ADVANTAGE_NAMES, AGGREGATIONS, KL_ESTIMATORS, OBJECTIVES, get_advantage,
                                  get_aggregation, get_objective)
from tempering.algorithms.advantages import gae, last_token_rewards, whiten
from tempering.algorithms.losses import cispo, gspo, k1, k3, ppo, truncated_is_weight, value_loss
from tempering.algorithms.shaping import Overlong, overlong_penalty
from tempering.config import AlgorithmConfig, ConfigError, load_config


def adv(name, rewards, groups):
    return get_advantage(name).fn(torch.tensor(rewards), torch.tensor(groups))


def close(got, want, atol=1e-4):
    torch.testing.assert_close(got, torch.tensor(want, dtype=got.dtype), atol=atol, rtol=0)


# ---------------------------------------------------------------------------------------------
# Advantages


def test_grpo_normalises_within_each_group():
    # group 0: [1, 0, 0, 1], mean 0.5, unbiased std sqrt(1/3) = 0.57735; group 1: [2, 4] -> +-0.7071
    close(adv("grpo", [1.0, 0.0, 2.0, 0.0, 1.0, 4.0], [0, 0, 1, 0, 0, 1]),
          [0.8660, -0.8660, -0.7071, -0.8660, 0.8660, 0.7071])


def test_drgrpo_and_rloo_by_hand():
    close(adv("drgrpo", [1.0, 0.0, 0.0, 0.0, 3.0, 1.0], [0, 0, 0, 0, 1, 1]), [0.75, -0.25, -0.25, -0.25, 1.0, -1.0])
    # leave-one-out: 1 - mean(0, 0) = 1; 0 - mean(1, 0) = -0.5
    close(adv("rloo", [1.0, 0.0, 0.0, 5.0, 1.0], [0, 0, 0, 1, 1]), [1.0, -0.5, -0.5, 4.0, -4.0])


def test_reinforce_pp_normalises_over_the_batch():
    # mean 0.25, unbiased std sqrt((0.5625 + 3 * 0.0625) / 3) = 0.5; groups play no part
    close(adv("reinforce_pp", [1.0, 0.0, 0.0, 0.0], [0, 0, 1, 1]), [1.5, -0.5, -0.5, -0.5])
    close(adv("reinforce_pp", [1.0, 0.0, 0.0, 0.0], [0, 1, 2, 3]), [1.5, -0.5, -0.5, -0.5])


def test_reinforce_pp_baseline_subtracts_the_group_mean_then_divides_by_the_batch_std():
    # differences [0.5, -0.5, 0, 0]; their unbiased std sqrt(0.5 / 3) = 0.40825
    close(adv("reinforce_pp_baseline", [1.0, 0.0, 0.5, 0.5], [0, 0, 1, 1]), [1.2247, -1.2247, 0.0, 0.0])


@pytest.mark.parametrize("name", ["grpo", "drgrpo", "rloo", "reinforce_pp", "reinforce_pp_baseline"])
def test_identical_rewards_and_one_sample_groups_give_zero_never_nan(name):
    close(adv(name, [0.3, 0.3, 0.3], [0, 0, 0]), [0.0, 0.0, 0.0])
    close(adv(name, [0.7], [0]), [0.0])  # a batch of one sample


def test_one_sample_groups_next_to_others():
    # group-relative advantages give a lone sample 0; the batch-normalised one does not
    close(adv("grpo", [1.0, 0.0, 1.0], [0, 0, 1]), [0.7071, -0.7071, 0.0])
    close(adv("rloo", [1.0, 0.0, 1.0], [0, 0, 1]), [1.0, -1.0, 0.0])
    # mean 2/3, std sqrt((1/9 + 4/9 + 1/9) / 2) = 0.57735
    close(adv("reinforce_pp", [1.0, 0.0, 1.0], [0, 0, 1]), [0.5774, -1.1547, 0.5774])
    assert get_advantage("grpo").group_relative and not get_advantage("reinforce_pp").group_relative
    assert get_advantage("gae").fn is None and not get_advantage("gae").group_relative


def test_gae_by_hand():
    mask = torch.ones(1, 3)
    rewards = torch.tensor([[0.0, 0.0, 1.0]])
    values = torch.tensor([[0.5, 0.6, 0.7]])
    a, ret = gae(rewards, values, mask, gamma=0.9, lam=0.5)
    # deltas: 0.9*0.6 - 0.5 = 0.04, 0.9*0.7 - 0.6 = 0.03, 1 - 0.7 = 0.3; A = delta + 0.45 A_next
    close(a, [[0.11425, 0.165, 0.3]], atol=1e-6)
    close(ret, [[0.61425, 0.765, 1.0]], atol=1e-6)
    a, ret = gae(rewards, values, mask, gamma=1.0, lam=1.0)  # Monte Carlo: A = R - V
    close(a, [[0.5, 0.4, 0.3]], atol=1e-6)
    close(ret, [[1.0, 1.0, 1.0]], atol=1e-6)


def test_gae_skips_unmasked_tokens_and_handles_one_token_and_empty_rows():
    # row 0: a tool-output token in the middle (its value 9 must not enter);
    # row 1: a one-token sample; row 2: nothing to train (all zeros, no NaN)
    mask = torch.tensor([[1.0, 0.0, 1.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    values = torch.tensor([[0.5, 9.0, 0.7], [0.25, 3.0, 3.0], [1.0, 1.0, 1.0]])
    rewards = last_token_rewards(torch.tensor([1.0, 1.0, 5.0]), mask)
    close(rewards, [[0.0, 0.0, 1.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    a, ret = gae(rewards, values, mask, gamma=1.0, lam=1.0)
    close(a, [[0.5, 0.0, 0.3], [0.75, 0.0, 0.0], [0.0, 0.0, 0.0]], atol=1e-6)
    close(ret, [[1.0, 0.0, 1.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]], atol=1e-6)


def test_whiten_over_masked_tokens():
    close(whiten(torch.tensor([[1.0, 3.0, 9.0]]), torch.tensor([[1.0, 1.0, 0.0]])), [[-1.0, 1.0, 0.0]])
    close(whiten(torch.tensor([[4.0, 4.0]]), torch.tensor([[1.0, 1.0]])), [[0.0, 0.0]])  # uniform: no NaN
    close(whiten(torch.tensor([[4.0]]), torch.tensor([[0.0]])), [[0.0]])


# ---------------------------------------------------------------------------------------------
# Policy objectives


def test_ppo_by_hand_with_clip_higher():
    # ratio e^0.5 = 1.6487 clipped to 1.28 for a positive advantage; unclipped when the
    # advantage is negative (min picks the larger penalty); ratio 1 passes through.
    logp = torch.tensor([[0.5, 0.5, 0.0]], requires_grad=True)
    out = ppo(logp, torch.zeros(1, 3), torch.tensor([[1.0, -1.0, 2.0]]), torch.ones(1, 3), 0.2, 0.28)
    close(out.loss.detach(), [[-1.28, math.exp(0.5), -2.0]])
    assert out.clipped.tolist() == [[True, True, False]]
    out.loss.sum().backward()
    # d/dlogp of -r A is -r A: clipped token 0; e^0.5 = 1.6487 for the negative one; -2 at ratio 1
    close(logp.grad, [[0.0, 1.6487, -2.0]])


def test_gspo_uses_one_sequence_ratio_with_token_gradients():
    # token log-ratios [0.1, 0.3] (third slot padding, its -5 must not count): s = e^0.2 = 1.2214
    logp = torch.tensor([[0.1, 0.3, -5.0]], requires_grad=True)
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    pos = gspo(logp, torch.zeros(1, 3), torch.ones(1, 3), mask, 3e-4, 4e-4)
    close(pos.loss.detach()[:, :2], [[-1.0004, -1.0004]])  # clipped to 1 + 4e-4
    assert pos.clipped.tolist() == [[True, True, False]]
    logp2 = logp.detach().clone().requires_grad_(True)
    neg = gspo(logp2, torch.zeros(1, 3), -torch.ones(1, 3), mask, 3e-4, 4e-4)
    close(neg.loss.detach()[:, :2], [[1.2214, 1.2214]])  # negative advantage: unclipped
    (neg.loss * mask).sum().backward()
    close(logp2.grad, [[1.2214, 1.2214, 0.0]])  # s * grad logp_t on each token


def test_gspo_fully_masked_row_is_finite():
    out = gspo(torch.tensor([[-3.0, -4.0]]), torch.zeros(1, 2), torch.ones(1, 2), torch.zeros(1, 2), 3e-4, 4e-4)
    assert torch.isfinite(out.loss).all() and not out.clipped.any()


def test_cispo_keeps_every_gradient_scaled_by_the_clipped_weight():
    logp = torch.tensor([[-0.5, -1.5]], requires_grad=True)
    old = torch.tensor([[-1.0, -1.0]])  # ratios e^0.5 = 1.6487 -> 1.28 and e^-0.5 = 0.6065 -> 0.8
    out = cispo(logp, old, torch.tensor([[1.0, -1.0]]), torch.ones(1, 2), 0.2, 0.28)
    close(out.loss.detach(), [[-1.28 * 1 * -0.5, -0.8 * -1 * -1.5]])  # [0.64, -1.2]
    out.loss.sum().backward()
    close(logp.grad, [[-1.28, 0.8]])  # -w A, never zero
    assert out.clipped.tolist() == [[True, True]]


def test_truncated_importance_weights():
    w, cut = truncated_is_weight(torch.tensor([0.0, math.log(3.0), -1.0]), 2.0)
    close(w, [1.0, 2.0, 0.3679])
    assert cut.tolist() == [False, True, False]
    w, cut = truncated_is_weight(torch.tensor([math.log(3.0)]), 0.0)  # no cap
    close(w, [3.0])
    assert not cut.any()


def test_kl_estimators_by_hand():
    logp, ref = torch.tensor([-1.0, -1.0, -2.0]), torch.tensor([-1.0, -2.0, -1.0])
    close(k1(logp, ref), [0.0, 1.0, -1.0])
    close(k3(logp, ref), [0.0, math.exp(-1) + 1 - 1, math.exp(1) - 1 - 1])  # exp(d) - d - 1, d = ref - logp
    assert set(KL_ESTIMATORS) == {"k1", "k3"}


def test_clipped_value_loss_by_hand():
    v, old, ret = torch.tensor([1.0, 0.55, 0.0]), torch.tensor([0.5, 0.5, 0.0]), torch.tensor([0.6, 0.6, 1.0])
    # v_clip = [0.7, 0.55, 0]: 0.5 max(0.16, 0.01) = 0.08; 0.5 * 0.0025; 0.5 * 1
    close(value_loss(v, old, ret, 0.2), [0.08, 0.00125, 0.5], atol=1e-6)
    close(value_loss(v, old, ret, 0.0), [0.08, 0.00125, 0.5], atol=1e-6)
    # the clipped term wins when the update moves v away from the target past the clip
    close(value_loss(torch.tensor([0.0]), torch.tensor([0.5]), torch.tensor([1.0]), 0.2), [0.5], atol=1e-6)
    close(value_loss(torch.tensor([2.0]), torch.tensor([0.0]), torch.tensor([1.0]), 0.2), [0.5], atol=1e-6)


# ---------------------------------------------------------------------------------------------
# Aggregations


def test_aggregations_by_hand():
    # Two sequences: 2 tokens with loss 1 each, and 1 token with loss 4 (third slot padding).
    token_loss = torch.tensor([[1.0, 1.0, 0.0], [4.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    total = {name: (token_loss * get_aggregation(name)(mask, 10)).sum().item() for name in AGGREGATIONS}
    assert total["seq_mean_token_mean"] == pytest.approx((1.0 + 4.0) / 2)  # per sequence, then sequences
    assert total["seq_sum_const"] == pytest.approx((2.0 + 4.0) / 10 / 2)  # token sums over a constant budget
    assert total["token_mean"] == pytest.approx(6.0 / 3)


@pytest.mark.parametrize("name", ["token_mean", "seq_mean_token_mean", "seq_sum_const"])
def test_a_fully_masked_row_weighs_nothing(name):
    mask = torch.tensor([[1.0, 1.0], [0.0, 0.0]])
    w = get_aggregation(name)(mask, 4)
    assert torch.isfinite(w).all() and w[1].abs().sum() == 0
    assert torch.isfinite(get_aggregation(name)(torch.zeros(2, 2), 4)).all()


def test_weights_follow_each_aggregation_on_a_random_batch():
    """The weight of every token, against each aggregation's formula over the whole batch (the
    trainer computes them once on the full batch, so micro-batches add up to the batch's loss)."""
    torch.manual_seed(0)
    mask = (torch.rand(6, 5) > 0.3).float()
    mask[:, 0] = 1.0  # no empty sequence
    n, budget = mask.shape[0], 8
    expected = {"seq_mean_token_mean": mask / mask.sum(1, keepdim=True) / n,
                "seq_sum_const": mask / budget / n,
                "token_mean": mask / mask.sum()}
    for name, want in expected.items():
        torch.testing.assert_close(get_aggregation(name)(mask, budget), want)
    # a micro-batch weighted on its own would be another loss: the batch's normaliser matters
    assert not torch.allclose(get_aggregation("token_mean")(mask[:2], budget), expected["token_mean"][:2])


@pytest.mark.parametrize("name", ["token_mean", "seq_mean_token_mean", "seq_sum_const"])
def test_micro_batch_losses_add_up_only_with_the_full_batch_weights(name):
    """Split into micro-batches of 2 and 4 rows: weights sliced from the full batch give the
    full-batch loss; weights computed per micro-batch (the bug this guards) give another."""
    torch.manual_seed(1)
    mask = (torch.rand(6, 5) > 0.3).float()
    mask[:, 0] = 1.0
    token_loss = torch.randn(6, 5)
    agg, budget, parts = get_aggregation(name), 8, (slice(0, 2), slice(2, 6))
    weights = agg(mask, budget)
    full = (token_loss * weights).sum()
    sliced = sum((token_loss[r] * weights[r]).sum() for r in parts)
    per_micro = sum((token_loss[r] * agg(mask[r], budget)).sum() for r in parts)
    assert sliced.item() == pytest.approx(full.item(), abs=1e-6)
    assert abs(per_micro.item() - full.item()) > 1e-3


# ---------------------------------------------------------------------------------------------
# Reward shaping


def test_overlong_penalty_by_hand():
    lengths, budgets = torch.tensor([6, 7, 8, 10, 12]), torch.full((5,), 10)
    close(overlong_penalty(lengths, budgets, buffer=4, factor=1.0), [0.0, -0.25, -0.5, -1.0, -1.0])
    close(overlong_penalty(lengths, budgets, buffer=4, factor=0.5), [0.0, -0.125, -0.25, -0.5, -0.5])
    close(overlong_penalty(lengths, budgets, buffer=0, factor=1.0), [0.0] * 5)  # off
    # a task's own smaller budget (6) wins over the rollout's (10): 5 tokens is 3/4 into its buffer
    assert Overlong(buffer=4, penalty=1.0, max_tokens=10)([1, 5, 6], task_budget=6) == [0.0, -0.75, -1.0]
    assert not Overlong().active


# ---------------------------------------------------------------------------------------------
# Names: the registries, the config's choices, and errors at load


def test_config_choices_are_the_registries():
    hints = typing.get_type_hints(AlgorithmConfig)
    assert set(typing.get_args(hints["advantage"])) == set(ADVANTAGE_NAMES)
    assert set(typing.get_args(hints["loss"])) == set(OBJECTIVES)
    assert set(typing.get_args(hints["aggregation"])) == set(AGGREGATIONS)
    assert set(typing.get_args(hints["kl_estimator"])) == set(KL_ESTIMATORS)


@pytest.mark.parametrize("key, value, known", [
    ("advantage", "ppo2", "drgrpo, gae, grpo, reinforce_pp, reinforce_pp_baseline, rloo"),
    ("loss", "dapo", "cispo, gspo, ppo"),
    ("aggregation", "mean", "seq_mean_token_mean, seq_sum_const, token_mean"),
    ("kl_estimator", "k2", "k1, k3"),
    ("off_policy", "v-trace", "behaviour, decoupled"),
])
def test_unknown_names_fail_at_config_load(tmp_path, key, value, known):
    p = tmp_path / "c.toml"
    p.write_text(f"[algorithm]\n{key} = '{value}'\n")
    with pytest.raises(ConfigError) as e:
        load_config(p)
    assert str(e.value).startswith(f"{p}: algorithm.{key}: unknown {value!r} (known: {known})")
    with pytest.raises(ConfigError, match=f"algorithm.{key}: unknown"):
        load_config(None, [f"--algorithm.{key}={value}"])


@pytest.mark.parametrize("override, words", [
    ("--algorithm.kl_coef=-0.1", ">= 0"),
    ("--algorithm.entropy_coef=-1", ">= 0"),
    ("--algorithm.gamma=1.5", "[0, 1]"),
    ("--algorithm.lam=-0.1", "[0, 1]"),
    ("--algorithm.clip_low=1.0", "(0, 1)"),
    ("--algorithm.clip_high=0", "> 0"),
    ("--algorithm.value_lr=0", "> 0"),
    ("--algorithm.overlong_buffer=-4", ">= 0"),
    ("--algorithm.is_cap=0.5", "0 (none) or a number >= 1"),
    ("--algorithm.is_cap=2", "off_policy = 'decoupled'"),
])
def test_bad_numbers_fail_at_config_load(override, words):
    with pytest.raises(ConfigError) as e:
        load_config(None, [override])
    assert override.split("=")[0][2:] in str(e.value) and words in str(e.value)


def test_registry_lookups_name_the_key():
    with pytest.raises(ValueError, match="algorithm.loss: unknown 'dapo'"):
        get_objective("dapo")
    with pytest.raises(ValueError, match="algorithm.aggregation"):
        get_aggregation("nope")
    with pytest.raises(ValueError, match="algorithm.advantage"):
        get_advantage("ppo2")
    cfg = load_config(None, ["--algorithm.off_policy=decoupled", "--algorithm.is_cap=2"])
    assert cfg.algorithm.is_cap == 2.0
