import pytest

from tempering.config import TasksConfig
from tempering.pool import TaskPool, is_heldout
from tempering.tasks import domains, get_domain

DOMAINS = domains()


def test_unknown_domain_is_named():
    with pytest.raises(ValueError, match="unknown task domain 'chess' .*families: arithmetic"):
        get_domain("chess")
    with pytest.raises(ValueError, match="chess"):
        TaskPool(TasksConfig(weights={"chess": 1.0}))


def test_heldout_never_drawn_for_training():
    procedural = [name for name, d in DOMAINS.items() if d.alphabet]  # terminal: its own test below
    pool = TaskPool(TasksConfig(weights={name: 1.0 for name in procedural}, eval_per_domain=20, sft_per_domain=50))
    heldout = pool.heldout()
    assert len(heldout) == 20 * len(procedural) and all(is_heldout(t) for t in heldout)
    train = pool.next_tasks(500) + pool.sft_examples()
    assert not any(is_heldout(t) for t in train)
    # a task is its prompt and its environment (one prompt can name different workspaces)
    assert {t.id for t in heldout}.isdisjoint({t.id for t in train})
    assert pool.heldout() == heldout  # the same every time


def test_domain_mix_follows_weights():
    pool = TaskPool(TasksConfig(weights={"arithmetic": 3.0, "strings": 1.0}))
    domains = [t.domain for t in pool.next_tasks(2000)]
    assert 0.7 < domains.count("arithmetic") / 2000 < 0.8


@pytest.mark.parametrize("name", sorted(n for n, d in DOMAINS.items() if d.alphabet))
def test_alphabet_covers_every_task(name):
    import random

    d, rng = get_domain(name), random.Random(0)
    for _ in range(200):
        t = d.generate(rng)
        files = "".join(text for _, text in t.environment.files) if t.environment else ""
        assert set(t.prompt + t.answer + "".join(t.reference_turns) + files) <= set(d.alphabet), t


def test_terminal_tasks_are_shipped_folders_with_a_stable_identity():
    """Every process materialises a task at the same path, so a task's id (which includes its
    folder) and the held-out split agree between the trainer and the rollout worker."""
    import random

    from tempering.tasks.terminal import catalog

    d = get_domain("terminal")
    a, b = d.make(random.Random(3)), d.make(random.Random(3))
    assert a == b and a.environment.workdir == "/app"
    folder = a.environment.folder
    assert folder == str(catalog.folder(folder.rsplit("/", 1)[1]))
    assert (catalog.folder(folder.rsplit("/", 1)[1]) / "instruction.md").read_text() == a.prompt
    assert a.messages[-1].content == a.prompt and set(a.tools) == {"run", "read", "write", "edit", "submit"}
