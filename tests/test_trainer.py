"""The trainer: micro-batches give the full-batch gradient; schedules; SFT learns."""

import copy

import pytest
import torch

from tempering.config import AlgorithmConfig, TrainerConfig
from tempering.models import Arch, build_model
from tempering.records import Batch
from tempering.trainer import Trainer
from tempering.trainer.step import lr_factor

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
                 group_ids=torch.zeros(rows, dtype=torch.long))


@pytest.mark.parametrize("loss", ["grpo", "drgrpo", "dapo"])
def test_micro_batches_give_the_full_batch_update(loss):
    base = build_model(ARCH, seed=1)
    algo = AlgorithmConfig(advantage="grpo", loss=loss)
    updated = []
    for micro in (10_000, 9):  # one micro-batch, then one row per micro-batch
        model = copy.deepcopy(base)
        trainer = Trainer(model, TrainerConfig(lr=1e-2, micro_batch_tokens=micro), algo, norm_tokens=8)
        stats = trainer.rl_step(rl_batch())
        updated.append((model.state_dict(), stats.loss))
    for k in updated[0][0]:
        torch.testing.assert_close(updated[0][0][k], updated[1][0][k], atol=1e-6, rtol=1e-5)
    assert updated[0][1] == pytest.approx(updated[1][1], abs=1e-6)


def test_positive_advantage_raises_the_sampled_tokens_logprob():
    model = build_model(ARCH, seed=2)
    batch = rl_batch(seed=3)
    batch.advantages = batch.loss_mask.clone()  # every sampled token was good
    from tempering.trainer import token_logprobs

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
    assert trainer.reference is not None
    first = trainer.rl_step(rl_batch(seed=6))
    second = trainer.rl_step(rl_batch(seed=6))
    assert first.kl_ref == pytest.approx(0.0, abs=1e-7)  # policy == reference before any update
    assert second.kl_ref > 1e-6  # the policy moved; the reference did not
    for p in trainer.reference.parameters():
        assert not p.requires_grad
