"""`GroupKey.tag`: a sandbox execution joined to its sample, and to its batch or evaluation."""

from tempering.records import Task
from tempering.rollout.group_key import GroupKey
from tempering.sandbox.request import ExecTag

TASK = Task(id="t7", domain="code/fix", prompt="p")


def test_a_training_groups_tag_names_its_batch_and_an_evaluations_its_label():
    assert GroupKey.train(12, 40).tag(TASK, 3) == ExecTag(sample="t7/3", batch=12, eval="", domain="code/fix")
    assert GroupKey.evaluation("final").tag(TASK, 0) == ExecTag(sample="t7/0", batch=None, eval="final",
                                                                domain="code/fix")


def test_a_group_outside_training_tags_only_its_sample_and_tenant():
    assert GroupKey("serve").tag(TASK, 0, "acme") == ExecTag(sample="t7/0", domain="code/fix", tenant="acme")


def test_keys_are_values():
    assert GroupKey.train(1, 2) == GroupKey.train(1, 2) and hash(GroupKey.train(1, 2)) == hash(GroupKey.train(1, 2))
    assert GroupKey.train(1, 2) != GroupKey.train(1, 3)
