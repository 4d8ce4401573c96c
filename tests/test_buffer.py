"""Staleness and the accounting of every sample: trained, or dropped with a reason; advantages over
the whole batch; overlong shaping before them."""

import json

import pytest
import torch

from tempering.algorithms import Overlong, get_advantage
from tempering.buffer import Buffer
from tempering.lineage import LineageStore
from tempering.config import BufferConfig
from tempering.records import Group, Reward, Task, Trajectory


def traj(i, versions, prompt=(5, 6), tokens=(7, 8, 9)):
    return Trajectory(task_id="t", domain="d", sample_index=i, prompt_ids=list(prompt), token_ids=list(tokens),
                      logprobs=[-0.5] * len(tokens), loss_mask=[1] * len(tokens), versions=list(versions),
                      text="x", finish_reason="stop")


def reward(total, failed=False):
    return Reward(components={"outcome": total}, weights={"outcome": 1.0}, total=total, failed=failed,
                  reason="verifier crashed" if failed else "")


TASK = Task(id="t", domain="d", prompt="p", answer="a")


def make_buffer(tmp_path, k=1, drop_uniform=True, advantage="drgrpo", overlong=Overlong()):
    lineage = LineageStore(tmp_path)
    return Buffer(BufferConfig(max_staleness=k, drop_uniform_groups=drop_uniform), get_advantage(advantage), lineage,
                  overlong=overlong), lineage


def fates(tmp_path):
    return [json.loads(line)["fate"] for line in (tmp_path / "samples.jsonl").read_text().splitlines()]


def test_too_old_tokens_are_dropped_and_counted(tmp_path):
    buf, lineage = make_buffer(tmp_path, k=1)
    # Trainer at version 5: a sample whose oldest token is from version 3 is 2 behind (> 1).
    # A partial rollout mixing versions 3 and 5 is judged by its oldest token.
    g = Group(TASK, [traj(0, [5, 5, 5]), traj(1, [4, 5, 5]), traj(2, [3, 5, 5]), traj(3, [3, 3, 3])],
              [reward(1.0), reward(0.0), reward(1.0), reward(0.0)])
    batch, groups, acct = buf.make_batch([g], version=5, step=0)
    lineage.close()
    assert acct.trained == 2 and acct.dropped["stale"] == 2 and acct.total == 4
    assert fates(tmp_path) == ["trained", "trained", "stale", "stale"]
    assert batch.input_ids.shape == (2, 5)
    # advantages recomputed over the survivors only: rewards [1, 0] -> [0.5, -0.5]
    assert groups[0].advantages == [0.5, -0.5]


def test_synchronous_bound_drops_anything_older(tmp_path):
    buf, lineage = make_buffer(tmp_path, k=0)
    g = Group(TASK, [traj(0, [2, 2, 2]), traj(1, [2, 2, 2]), traj(2, [1, 2, 2])],
              [reward(1.0), reward(0.0), reward(1.0)])
    _, _, acct = buf.make_batch([g], version=2, step=0)
    lineage.close()
    assert acct.trained == 2 and acct.dropped["stale"] == 1


def test_failed_uniform_and_alone(tmp_path):
    buf, lineage = make_buffer(tmp_path)
    failed = Group(TASK, [traj(0, [0] * 3), traj(1, [0] * 3)], [reward(1.0), reward(0.0, failed=True)])
    uniform = Group(TASK, [traj(0, [0] * 3), traj(1, [0] * 3)], [reward(1.0), reward(1.0)])
    batch, groups, acct = buf.make_batch([failed, uniform], version=0, step=3)
    lineage.close()
    assert batch is None and groups == []
    assert acct.trained == 0 and acct.dropped == {"failed": 1, "alone": 1, "uniform": 2}
    rows = [json.loads(line) for line in (tmp_path / "samples.jsonl").read_text().splitlines()]
    assert len(rows) == 4 and all(r["step"] == 3 for r in rows)
    assert rows[1]["reason"] == "verifier crashed"


def test_packing_aligns_masks_logprobs_and_advantages(tmp_path):
    buf, _ = make_buffer(tmp_path, drop_uniform=False)
    g = Group(TASK, [traj(0, [0, 0], tokens=(7, 8)), traj(1, [0, 0, 0, 0], tokens=(7, 8, 9, 10))],
              [reward(1.0), reward(0.0)])
    batch, _, _ = buf.make_batch([g], version=0, step=0)
    assert batch.input_ids.tolist() == [[5, 6, 7, 8, 0, 0], [5, 6, 7, 8, 9, 10]]
    assert batch.loss_mask.tolist() == [[0, 0, 1, 1, 0, 0], [0, 0, 1, 1, 1, 1]]
    assert batch.seq_lens.tolist() == [4, 6]
    torch.testing.assert_close(batch.advantages[0], torch.tensor([0, 0, 0.5, 0.5, 0, 0]))
    assert batch.old_logprobs[1, 2:].tolist() == [-0.5] * 4 and batch.versions[0].tolist() == [-1, -1, 0, 0, -1, -1]
    assert batch.rewards.tolist() == [1.0, 0.0] and batch.version == 0


def test_batch_normalised_advantages_see_every_group_and_keep_lone_samples(tmp_path):
    buf, _ = make_buffer(tmp_path, advantage="reinforce_pp")
    # a lone survivor (its sibling failed) is kept: REINFORCE++ gives it a batch-relative advantage
    a = Group(TASK, [traj(0, [0] * 3), traj(1, [0] * 3)], [reward(1.0), reward(0.0)])
    b = Group(TASK, [traj(0, [0] * 3), traj(1, [0] * 3)], [reward(0.0), reward(0.0, failed=True)])
    c = Group(TASK, [traj(0, [0] * 3)], [reward(0.0)])
    batch, groups, acct = buf.make_batch([a, b, c], version=0, step=0)
    assert acct.trained == 4 and acct.dropped == {"failed": 1}
    # rewards [1, 0, 0, 0]: mean 0.25, std 0.5 over the batch
    assert [g.advantages for g in groups] == [[pytest.approx(1.5, abs=1e-5), pytest.approx(-0.5, abs=1e-5)],
                                              [pytest.approx(-0.5, abs=1e-5)], [pytest.approx(-0.5, abs=1e-5)]]
    assert batch.group_ids.tolist() == [0, 0, 1, 2]


def test_gae_leaves_advantages_to_the_trainer_and_carries_rewards(tmp_path):
    buf, _ = make_buffer(tmp_path, advantage="gae")
    g = Group(TASK, [traj(0, [2] * 3), traj(1, [1] * 3)], [reward(1.0), reward(0.25)])
    batch, groups, _ = buf.make_batch([g], version=2, step=0)
    assert batch.advantages.abs().sum() == 0 and groups[0].advantages == [0.0, 0.0]
    assert batch.rewards.tolist() == [1.0, 0.25] and batch.version == 2


def test_overlong_penalty_shapes_rewards_before_advantages_and_is_recorded(tmp_path):
    # budget 4 (the rollout's), buffer 2: 2 tokens no penalty, 3 tokens half, 4 tokens all of 0.5
    buf, lineage = make_buffer(tmp_path, drop_uniform=True, overlong=Overlong(buffer=2, penalty=0.5, max_tokens=4))
    g = Group(TASK, [traj(0, [0] * 2, tokens=(7, 8)), traj(1, [0] * 3), traj(2, [0] * 4, tokens=(7, 8, 9, 10))],
              [reward(1.0), reward(1.0), reward(1.0)])
    batch, groups, acct = buf.make_batch([g], version=0, step=0)
    lineage.close()
    # all solved, so uniform before shaping; the length penalty is a signal: [1, 0.75, 0.5]
    assert acct.trained == 3
    assert [r.total for r in groups[0].rewards] == [1.0, 0.75, 0.5]
    assert groups[0].advantages == [0.25, 0.0, -0.25]  # drgrpo: minus the mean 0.75
    rows = [json.loads(line) for line in (tmp_path / "samples.jsonl").read_text().splitlines()]
    assert [r["components"].get("overlong") for r in rows] == [None, -0.25, -0.5]
    assert [r["reward"] for r in rows] == [1.0, 0.75, 0.5]
