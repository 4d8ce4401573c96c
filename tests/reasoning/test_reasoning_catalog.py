"""The reasoning family: the catalog mirrors the installed reasoning-gym, every dataset but the
excluded ones is a registered domain, and tasks are seeded, carried by reference and rebuilt."""

from __future__ import annotations

import dataclasses
import inspect
import json
import os
import random
import subprocess
import sys

import pytest

from tempering.config import TasksConfig
from tempering.pool import TaskPool
from tempering.verdict import InfrastructureError
from tempering.tasks import domains, get_domain
from tempering.tasks.reasoning import catalog, entries, grade, scoring
from tempering.tasks.reasoning.domain import INSTRUCTION, extract


def test_the_catalog_is_the_installed_library():
    from reasoning_gym.dataset import ProceduralDataset
    from reasoning_gym.factory import DATASETS

    assert set(catalog.DATASETS) | set(catalog.EXCLUDED) == set(DATASETS)
    assert len(catalog.DATASETS) == len(set(catalog.DATASETS)) == 105 and set(catalog.EXCLUDED) == {
        "composite", "propositional_logic"}
    for table in (catalog.FIXED, catalog.ORACLES, catalog.CARRIED, catalog.HEAVY, catalog.MATH_VERIFY,
                  catalog.SEEDED_INIT):
        assert set(table) <= set(catalog.domain_datasets())
    for fix in catalog.FIXED.values():
        assert fix.why and fix.does and (not fix.guard or fix.guard in scoring.GUARDS)
        assert not fix.scorer or fix.scorer in scoring.SCORERS
    # the base class's scorer (and compute_decimal_reward) gives substring credit: all fixed
    for name in catalog.domain_datasets():
        scorer = DATASETS[name][0].score_answer
        if scorer is ProceduralDataset.score_answer or "compute_decimal_reward" in inspect.getsource(scorer):
            assert catalog.FIXED[name].full_at == 1.0, name
    # entries without an answer are exactly those we build an oracle for
    assert {n for n in catalog.domain_datasets() if entries.build(n, 0).entry["answer"] is None} == set(catalog.ORACLES)


def test_the_family_registers_every_dataset_as_a_domain():
    family = {n: d for n, d in domains().items() if d.family == "reasoning"}
    assert len(family) == len(catalog.domain_datasets()) == 104 > 100
    assert set(family) == {f"reasoning/{n}" for n in catalog.domain_datasets()}
    for name, d in family.items():
        assert d.make is not None and not d.is_dataset and d.alphabet == "" and not d.sandbox
        assert d.heavy == (name.split("/")[1] in catalog.HEAVY)


def test_tasks_are_seeded_carry_their_entry_by_reference_and_rebuild_it():
    d = get_domain("reasoning/gcd")
    a, b, c = d.make(random.Random(5)), d.make(random.Random(5)), d.make(random.Random(6))
    assert a == b and a != c and a.domain == "reasoning/gcd"
    ref = json.loads(a.ref)
    assert set(ref) == {"dataset", "seed", "config"} and ref["dataset"] == "gcd" and ref["config"] == {}
    built = entries.build(*entries.parse_ref(a.ref))
    assert a.prompt == a.messages[0].content == f"{built.entry['question'].rstrip()}\n\n{INSTRUCTION}"
    assert a.messages[0].role == "user" and a.answer == built.oracle
    assert a.reference == f"<answer>{a.answer}</answer>" and extract(a.reference) == a.answer
    assert a.budget.max_tokens == 2048 + len(a.answer)


def test_a_rebuilt_entry_must_be_the_tasks_own():
    """A task whose ref rebuilds another question (a generator that is not reproducible) is an
    infrastructure failure, not a wrong answer."""
    task = get_domain("reasoning/gcd").make(random.Random(1))
    other = dataclasses.replace(task, prompt="What is 2 + 2?")
    assert grade(task, task.reference).components["outcome"] == 1.0
    with pytest.raises(InfrastructureError, match="another question"):
        grade(other, task.reference)


def test_another_process_registers_the_family_without_reasoning_gym_and_builds_the_same_entries():
    """Registering the family imports neither reasoning-gym nor math-verify. And Python randomizes
    str hashes per process: every dataset verified by rebuilding its entry (all but
    catalog.CARRIED) must build the same question under another PYTHONHASHSEED, and those that
    draw from the global RNGs (codeio) the same answer."""
    names = [n for n in catalog.domain_datasets() if n not in catalog.CARRIED]
    code = ("import json, sys; from tempering.tasks import domains; "
            "n = sum(d.family == 'reasoning' for d in domains().values()); "
            "lazy = 'reasoning_gym' not in sys.modules and 'math_verify' not in sys.modules; "
            "from tempering.tasks.reasoning import entries; "
            "print(json.dumps([n, lazy, {n: entries.build(n, 1).entry['question'] for n in sys.argv[1:]}]))")
    out = subprocess.run([sys.executable, "-c", code, *names], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONHASHSEED": "12345"})
    assert out.returncode == 0, out.stderr[-2000:]
    registered, lazy, theirs = json.loads(out.stdout)
    assert registered == 104 and lazy
    assert {n: entries.build(n, 1).entry["question"] for n in names} == theirs
    codeio = [entries._build.__wrapped__("codeio", 26, "{}").oracle for _ in range(3)]
    assert len(set(codeio)) == 1  # seed 26's reference solution calls np.random


def test_an_entry_is_the_libraries_entry_at_its_seed():
    """Entries come from one dataset object per process with its seed set (no reloading of
    files): the same entry as a dataset created with that seed, except where the constructor
    itself draws from the seed (catalog.SEEDED_INIT, built afresh)."""
    rg = entries.library()
    for name in catalog.domain_datasets():
        fresh = rg.create_dataset(name, seed=3, size=1)[0]
        assert json.dumps(entries.build(name, 3).entry, sort_keys=True, default=str) == json.dumps(
            fresh, sort_keys=True, default=str), name


def test_the_pool_draws_tasks_and_sft_references():
    pool = TaskPool(TasksConfig(weights={"reasoning/*": 1.0}, sft_per_domain=1, eval_per_domain=1))
    assert len(pool.domains) == 104 and pool.alphabet == "" and not pool.needs_sandbox
    tasks = pool.next_tasks(8)
    assert all(t.domain.startswith("reasoning/") and t.id and t.reference for t in tasks)
    mix = {"reasoning/gcd": 1.0, "reasoning/rush_hour": 1.0}
    sft = TaskPool(TasksConfig(weights=mix, sft_per_domain=2)).sft_examples()
    assert len(sft) == 4 and all(t.reference.startswith("<answer>") for t in sft)
