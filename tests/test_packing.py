"""Shared-prompt layout: one packed forward pass gives each sample's own-row logprobs, entropy and
gradients (the oracle is the plain one-row-per-sample pass), and the trainer's update is the same
with it on or off."""

import copy
import dataclasses

import pytest
import torch

from tempering.buffer import pack
from tempering.config import AlgorithmConfig, TrainerConfig
from tempering.models import Arch, build_model
from tempering.records import Trajectory
from tempering.trainer import Trainer, token_logprobs
from tempering.trainer.packing import shared_prompt_layout

ARCH = Arch(vocab_size=20, hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2)


def sample(prompt, completion, mask=None, group=0):
    g = torch.Generator().manual_seed(sum(prompt) * 31 + len(completion))
    mask = mask or [1] * len(completion)
    t = Trajectory(task_id="t", domain="d", sample_index=0, prompt_ids=prompt, token_ids=completion,
                   logprobs=(-torch.rand(len(completion), generator=g)).tolist(), loss_mask=mask,
                   versions=[0 if m else -1 for m in mask], text="", finish_reason="stop")
    return t, float(torch.randn(1, generator=g)), group


def batch():
    """Group 0: three samples of one prompt (completions of 5, 1 and 3 tokens, the last with a
    tool output masked out) and one whose prompt differs; group 1: two samples of a longer prompt."""
    rows = [sample([1, 5, 6, 7], [8, 9, 10, 11, 2]), sample([1, 5, 6, 7], [2]),
            sample([1, 5, 6, 7], [12, 13, 14], [1, 0, 1]), sample([1, 5, 6, 3], [8, 2]),
            sample([1, 4, 4, 4, 4, 4, 9], [3, 3, 2], group=1), sample([1, 4, 4, 4, 4, 4, 9], [3, 2], group=1)]
    return pack(rows, pad_id=0, version=0)


def test_packed_rows_give_each_samples_own_logprobs_entropy_and_gradients():
    b = batch()
    model = build_model(ARCH, seed=3)
    twin = copy.deepcopy(model)
    rows = torch.arange(len(b.seq_lens))
    width = int(b.seq_lens.max())
    layout = shared_prompt_layout(b, rows, width)
    assert layout.input_ids.shape[0] == 3  # the two shared prompts and the one that differs
    # the longest packed row: the prompt once, then 3 completions without their last tokens
    assert layout.input_ids.shape[1] == 4 + 4 + 0 + 2
    got, got_h = layout.logprobs(model, temperature=0.7, with_entropy=True)
    want, want_h = token_logprobs(twin, b.input_ids, temperature=0.7, with_entropy=True)
    real = torch.arange(width - 1)[None, :] < (b.seq_lens[:, None] - 1)  # positions that score a real token
    torch.testing.assert_close(got[real], want[real], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got_h[real], want_h[real], atol=1e-5, rtol=1e-5)
    assert torch.all(got[~real] == 0)
    w = b.loss_mask[:, 1:] * torch.linspace(0.5, 2.0, width - 1)
    (got * w).sum().backward()
    (want * w).sum().backward()
    for (name, p), q in zip(model.named_parameters(), twin.parameters()):
        torch.testing.assert_close(p.grad, q.grad, atol=1e-5, rtol=1e-4, msg=name)


def test_a_completion_never_sees_another():
    """Changing one sample's completion leaves its siblings' logprobs as they were."""
    model = build_model(ARCH, seed=4)
    b = batch()
    rows, width = torch.arange(len(b.seq_lens)), int(b.seq_lens.max())
    before, _ = shared_prompt_layout(b, rows, width).logprobs(model)
    b.input_ids[0, 4:8] = torch.tensor([15, 16, 17, 18])
    after, _ = shared_prompt_layout(b, rows, width).logprobs(model)
    assert not torch.allclose(before[0], after[0])
    torch.testing.assert_close(before[1:], after[1:])


@pytest.mark.parametrize("algo", [AlgorithmConfig(), AlgorithmConfig(kl_coef=0.1, loss="gspo"),
                                  AlgorithmConfig(advantage="gae", aggregation="token_mean")])
def test_the_trainer_update_is_the_same_with_shared_prompts(algo):
    base = build_model(ARCH, seed=5)
    states = []
    for share, micro in ((False, 10_000), (True, 10_000), (True, 12)):
        model = copy.deepcopy(base)
        trainer = Trainer(model, TrainerConfig(lr=1e-2, share_prompts=share, micro_batch_tokens=micro), algo,
                          norm_tokens=8)
        b = batch()
        b.rewards = torch.tensor([1.0, 0.0, 0.5, 0.2, 1.0, 0.0])
        trainer.rl_step(b)
        states.append(model.state_dict())
    for k in states[0]:
        torch.testing.assert_close(states[1][k], states[0][k], atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(states[2][k], states[0][k], atol=1e-5, rtol=1e-4)


def test_micro_batches_keep_a_groups_rows_together():
    trainer = Trainer(build_model(ARCH, seed=6), TrainerConfig(micro_batch_tokens=12))
    b = batch()
    micro = trainer._micro_batches(b)
    assert sorted(r for m in micro for r in m.tolist()) == list(range(6))
    for m in micro:
        assert len({int(b.group_ids[r]) for r in m}) == 1  # a budget of 12 fits one packed group


def subset(b, rows):
    rows = torch.tensor(rows)
    return dataclasses.replace(b, **{f.name: getattr(b, f.name)[rows] for f in dataclasses.fields(b)
                                     if isinstance(getattr(b, f.name), torch.Tensor)})


@pytest.mark.parametrize("off_policy", ["behaviour", "decoupled"])
def test_mini_batches_are_optimizer_steps_on_each_share_of_the_groups(off_policy):
    """algorithm.mini_batches = 2 on groups {0, 1}: the same as two steps, one per group (the
    schedule is constant here; it steps once per batch). Samples fresh from the policy (behaviour = its logprobs at the
    start), so decoupled PPO's importance weight is 1 and its proximal policy is the behaviour one:
    it must match too, which it does only if the proximal logprobs are those before the first step."""
    base = build_model(ARCH, seed=7)
    first = [sample([1, 5, 6, 7], [8, 9, 10, 11, 2]), sample([1, 5, 6, 7], [2]), sample([1, 5, 6, 7], [12, 13, 2])]
    # group 1 repeats group 0, so the first step moves group 1's ratios in its advantages'
    # direction, past the clip range: only the right proximal policy clips them the same way
    b = pack(first + [(t, a, 1) for t, a, _ in first], pad_id=0, version=0)
    with torch.no_grad():
        start, _ = token_logprobs(base, b.input_ids)
    b.old_logprobs[:, 1:] = start * b.loss_mask[:, 1:]
    cfg = TrainerConfig(lr=0.1)  # large enough that the second step's ratios leave the clip range
    model = copy.deepcopy(base)
    trainer = Trainer(model, cfg, AlgorithmConfig(mini_batches=2, off_policy=off_policy), norm_tokens=8)
    trainer.rl_step(b)
    oracle = copy.deepcopy(base)
    plain = Trainer(oracle, cfg, AlgorithmConfig(), norm_tokens=8)
    for rows in ([0, 1, 2], [3, 4, 5]):
        plain.rl_step(subset(b, rows))
    assert trainer.scheduler.last_epoch == 1 and plain.scheduler.last_epoch == 2  # one schedule step a batch
    for k, v in oracle.state_dict().items():
        torch.testing.assert_close(model.state_dict()[k], v, atol=1e-6, rtol=1e-5)


def test_packed_rows_give_the_critics_own_values_and_gradients():
    from tempering.trainer.critic import Critic

    b = batch()
    critic = Critic(build_model(ARCH, seed=8))
    torch.nn.init.normal_(critic.value_head.weight, 0, 0.5, generator=torch.Generator().manual_seed(0))
    twin = copy.deepcopy(critic)
    rows, width = torch.arange(len(b.seq_lens)), int(b.seq_lens.max())
    got = shared_prompt_layout(b, rows, width).values(critic)
    want = twin.values(b.input_ids)
    real = torch.arange(width - 1)[None, :] < (b.seq_lens[:, None] - 1)
    torch.testing.assert_close(got[real], want[real], atol=1e-5, rtol=1e-5)
    (got * b.loss_mask[:, 1:]).sum().backward()
    (want * b.loss_mask[:, 1:]).sum().backward()
    for (name, p), q in zip(critic.named_parameters(), twin.parameters()):
        torch.testing.assert_close(p.grad, q.grad, atol=1e-5, rtol=1e-4, msg=name)
