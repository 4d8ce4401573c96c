"""Advantages and losses on tiny examples computed by hand."""

import math

import pytest
import torch

from tempering.algorithms import get_advantage, get_loss
from tempering.algorithms.losses import clipped_surrogate, k3_kl


def test_grpo_advantage_by_hand():
    adv = get_advantage("grpo")(torch.tensor([1.0, 0.0, 0.0, 1.0]))
    # mean 0.5, unbiased std sqrt(1/3) = 0.57735
    torch.testing.assert_close(adv, torch.tensor([0.8660, -0.8660, -0.8660, 0.8660]), atol=1e-4, rtol=0)


def test_drgrpo_advantage_by_hand():
    adv = get_advantage("drgrpo")(torch.tensor([1.0, 0.0, 0.0, 0.0]))
    torch.testing.assert_close(adv, torch.tensor([0.75, -0.25, -0.25, -0.25]))


def test_rloo_and_uniform_groups():
    torch.testing.assert_close(get_advantage("rloo")(torch.tensor([1.0, 0.0, 0.0])), torch.tensor([1.0, -0.5, -0.5]))
    for name in ("grpo", "drgrpo", "rloo"):
        assert torch.all(get_advantage(name)(torch.tensor([0.3, 0.3, 0.3])) == 0)


def test_unknown_names():
    with pytest.raises(ValueError, match="known: drgrpo, grpo, rloo"):
        get_advantage("ppo2")
    with pytest.raises(ValueError, match="algorithm.loss"):
        get_loss("nope")


def test_clipped_surrogate_by_hand():
    # ratio e^0.5 = 1.6487 clipped to 1.28 for a positive advantage; unclipped when the
    # advantage is negative (min picks the larger penalty); ratio 1 passes through.
    logp = torch.tensor([[0.5, 0.5, 0.0]])
    old = torch.zeros(1, 3)
    adv = torch.tensor([[1.0, -1.0, 2.0]])
    got = clipped_surrogate(logp, old, adv, 0.2, 0.28)
    torch.testing.assert_close(got, torch.tensor([[-1.28, math.exp(0.5), -2.0]]))


def test_grpo_and_drgrpo_aggregation_by_hand():
    # Two sequences: 2 tokens with loss 1 each, and 1 token with loss 4 (third slot padding).
    token_loss = torch.tensor([[1.0, 1.0, 0.0], [4.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    grpo = (token_loss * get_loss("grpo").weighting(mask, 10)).sum()
    assert grpo.item() == pytest.approx((1.0 + 4.0) / 2)  # mean over tokens, then over sequences
    dr = (token_loss * get_loss("drgrpo").weighting(mask, 10)).sum()
    assert dr.item() == pytest.approx((2.0 + 4.0) / 10 / 2)  # token sums over a constant budget
    dapo = (token_loss * get_loss("dapo").weighting(mask, 10)).sum()
    assert dapo.item() == pytest.approx(6.0 / 3)


def test_weights_follow_each_aggregation_on_a_random_batch():
    """The weight of every token, against each aggregation's formula over the whole batch (the
    trainer computes them once on the full batch, so micro-batches add up to the batch's loss)."""
    torch.manual_seed(0)
    mask = (torch.rand(6, 5) > 0.3).float()
    mask[:, 0] = 1.0  # no empty sequence
    n, budget = mask.shape[0], 8
    expected = {"grpo": mask / mask.sum(1, keepdim=True) / n,  # token mean per sequence, then sequence mean
                "drgrpo": mask / budget / n,  # token sums over a constant budget, then sequence mean
                "dapo": mask / mask.sum()}  # one mean over every token of the batch
    for name, want in expected.items():
        torch.testing.assert_close(get_loss(name).weighting(mask, budget), want)
    # a micro-batch weighted on its own would be another loss: the batch's normaliser matters
    assert not torch.allclose(get_loss("dapo").weighting(mask[:2], budget), expected["dapo"][:2])


@pytest.mark.parametrize("name", ["grpo", "drgrpo", "dapo"])
def test_micro_batch_losses_add_up_only_with_the_full_batch_weights(name):
    """Split into micro-batches of 2 and 4 rows: weights sliced from the full batch give the
    full-batch loss; weights computed per micro-batch (the bug this guards) give another."""
    torch.manual_seed(1)
    mask = (torch.rand(6, 5) > 0.3).float()
    mask[:, 0] = 1.0
    token_loss = torch.randn(6, 5)
    spec, budget, parts = get_loss(name), 8, (slice(0, 2), slice(2, 6))
    weights = spec.weighting(mask, budget)
    full = (token_loss * weights).sum()
    sliced = sum((token_loss[r] * weights[r]).sum() for r in parts)
    per_micro = sum((token_loss[r] * spec.weighting(mask[r], budget)).sum() for r in parts)
    assert sliced.item() == pytest.approx(full.item(), abs=1e-6)
    assert abs(per_micro.item() - full.item()) > 1e-3


def test_k3_kl_is_zero_at_equality_and_positive_otherwise():
    assert k3_kl(torch.tensor([-1.0]), torch.tensor([-1.0])).item() == 0
    assert k3_kl(torch.tensor([-1.0]), torch.tensor([-2.0])).item() == pytest.approx(math.exp(-1) + 1 - 1)
