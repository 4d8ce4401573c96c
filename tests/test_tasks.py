import pytest

from tempering.config import TasksConfig
from tempering.pool import TaskPool, is_heldout
from tempering.tasks import DOMAINS, get_domain


def test_unknown_domain_is_named():
    with pytest.raises(ValueError, match="unknown task domain 'chess' .*known: arithmetic"):
        get_domain("chess")
    with pytest.raises(ValueError, match="chess"):
        TaskPool(TasksConfig(weights={"chess": 1.0}))


def test_heldout_never_drawn_for_training():
    pool = TaskPool(TasksConfig(weights={name: 1.0 for name in DOMAINS}, eval_per_domain=20, sft_per_domain=50))
    heldout = pool.heldout()
    assert len(heldout) == 20 * len(DOMAINS) and all(is_heldout(t) for t in heldout)
    train = pool.next_tasks(500) + pool.sft_examples()
    assert not any(is_heldout(t) for t in train)
    # a task is its prompt and its environment (one prompt can name different workspaces)
    assert {t.id for t in heldout}.isdisjoint({t.id for t in train})
    assert pool.heldout() == heldout  # the same every time


def test_domain_mix_follows_weights():
    pool = TaskPool(TasksConfig(weights={"arithmetic": 3.0, "strings": 1.0}))
    domains = [t.domain for t in pool.next_tasks(2000)]
    assert 0.7 < domains.count("arithmetic") / 2000 < 0.8


@pytest.mark.parametrize("name", sorted(DOMAINS))
def test_alphabet_covers_every_task(name):
    import random

    d, rng = get_domain(name), random.Random(0)
    for _ in range(200):
        t = d.make(rng)
        files = "".join(text for _, text in t.environment.files) if t.environment else ""
        assert set(t.prompt + t.answer + "".join(t.reference_turns) + files) <= set(d.alphabet), t
