"""The `conclusion` family: questions drawn from the report, the reference conclusion right on
many seeds, the exact check strict about direction and size (negations, hedges, both directions,
bare numbers and the format example score 0), and what graders see of a sample."""

from __future__ import annotations

import random
import re
import string

import pytest

from tempering.agent.format import tool_format
from tempering.reward.rubrics import messages, get_rubric
from tempering.verdict import VerifierContext
from tempering.rollout.episode import Episode, replay
from tempering.tasks import get_domain
from tempering.tasks.finance import DOMAINS
from tempering.tasks.finance.calc import evaluate
from tempering.tasks.finance.conclusion import INSTRUCTIONS, RUBRIC, judge as judge_change
from tempering.tasks.finance.domain import decode_ref, question
from tempering.tasks.finance.model import report
from tempering.tasks.finance.questions import ABSENT, judge
from tempering.tokenizer import char_tokenizer

TOK = char_tokenizer(string.printable)
NAMES = ("finance/conclusion", "finance/conclusion-inline")


def tasks(name: str, n: int, seed: int = 0) -> list:
    rng = random.Random(seed)
    return [get_domain(name).generate(rng) for _ in range(n)]


def verdict(task, answer: str) -> tuple[bool, float, str]:
    return judge(question(task.ref), answer, report(decode_ref(task.ref)[0]).scale)


def by_measure() -> dict[str, object]:
    """One task per measure (revenue, each margin, total debt)."""
    out = {}
    for task in tasks("finance/conclusion", 200, seed=5):
        out.setdefault(question(task.ref).change.measure, task)
    assert set(out) == {"revenue", "gross margin", "operating margin", "net margin", "total debt"}
    return out


def test_the_reference_conclusion_is_right_on_many_seeds():
    measures = set()
    for name in NAMES:
        for task in tasks(name, 150):
            q = question(task.ref)
            c = q.change
            measures.add(c.measure)
            assert task.answer == q.answer == c.statement and task.answer.endswith(".")
            assert verdict(task, task.answer) == (True, 1.0, "correct"), task.answer
            # the question, the reference's calculations and the change agree
            results: list[str] = []
            for step in c.steps:
                results.append(evaluate(step.format(*results)))
            assert float(results[-1]) == q.value == c.value and abs(c.value) > 10 * c.tol
            assert f"{abs(c.value):.1f}" in task.answer and INSTRUCTIONS in task.prompt
            if name.endswith("-inline"):
                assert task.reference == task.answer
            else:
                assert task.reference_turns[-1] == task.answer and task.reference_turns[0] == "$list_pages"
    assert measures == {"revenue", "gross margin", "operating margin", "net margin", "total debt"}


def test_questions_are_drawn_deterministically_from_the_seeds():
    a, b = tasks("finance/conclusion", 5, seed=3), tasks("finance/conclusion", 5, seed=3)
    assert a == b and [t.ref for t in a] != [t.ref for t in tasks("finance/conclusion", 5, seed=4)]
    task = a[0]
    assert question(task.ref).text in task.prompt and re.search(r"fiscal \d{4} to (the end of )?fiscal \d{4}",
                                                                 question(task.ref).text)


def _forms(task) -> dict[str, str]:
    """Right answers in other words, and the change with its sign or size altered."""
    c = question(task.ref).change
    size = f"{abs(c.value):.1f}"
    unit = " percentage points" if c.points else "%"
    up, down = (("rose", "fell") if c.measure == "total debt" else ("improved", "deteriorated"))
    said, other = (up, down) if c.value > 0 else (down, up)
    return {"size": size, "unit": unit, "said": said, "other": other, "measure": c.measure.capitalize()}


@pytest.mark.parametrize("measure", ["revenue", "gross margin", "operating margin", "net margin", "total debt"])
def test_right_conclusions_in_other_words_score(measure):
    task = by_measure()[measure]
    f = _forms(task)
    c = question(task.ref).change
    word = "increased" if c.value > 0 else "decreased"
    right = [f"{f['measure']} {f['said']} by {f['size']}{f['unit']}.",
             f"**Answer:** {f['measure']} {word} {f['size']}{f['unit']} year over year.",
             f"{f['measure']} {word} by {'-' if c.value < 0 else ''}{f['size']}{f['unit']}."]
    if c.points:
        right.append(f"{f['measure']} {word} by {f['size']} points, from {c.cited[0]:.1f}% to {c.cited[1]:.1f}%.")
    for answer in right:
        assert verdict(task, answer)[0], (answer, verdict(task, answer))


@pytest.mark.parametrize("measure", ["revenue", "net margin", "total debt"])
def test_junk_and_wrong_conclusions_score_0(measure):
    task = by_measure()[measure]
    f = _forms(task)
    c = question(task.ref).change
    word, opposite = ("increased", "decreased") if c.value > 0 else ("decreased", "increased")
    off = f"{abs(c.value) + 1:.1f}"
    wrong = {
        "empty": "", "zero": "0", "absent": ABSENT, "bare number": f["size"], "bare percent": f"{f['size']}{f['unit']}",
        "no size": f"{f['measure']} {word}.", "no unit": f"{f['measure']} {word} by {f['size']}.",
        "both directions": f"{f['measure']} {word} by {f['size']}{f['unit']} and {opposite} by {f['size']}{f['unit']}.",
        "opposite direction": f"{f['measure']} {opposite} by {f['size']}{f['unit']}.",
        "negated": f"{f['measure']} did not {opposite[:-1]}; it {word} by {f['size']}{f['unit']}.",
        "negated, contracted": f"{f['measure']} didn't {opposite[:-1]}, it {word} {f['size']}{f['unit']}.",
        "flat": f"{f['measure']} was roughly flat, {word} {f['size']}{f['unit']}.",
        "wrong size": f"{f['measure']} {word} by {off}{f['unit']}.",
        "hedged sizes": f"{f['measure']} {word} by {f['size']}{f['unit']} or {off}{f['unit']}.",
        "sign against the word": f"{f['measure']} {word} by {'-' if c.value > 0 else '+'}{f['size']}{f['unit']}.",
        "the format example": INSTRUCTIONS,
        "the example's form": '<measure> increased|decreased by N.N% from fiscal X to fiscal Y',
        "the question back": question(task.ref).text,
        "a list of figures": " ".join(f"{word} {x:.1f}%" for x in range(1, 8)),
        "random text": " ".join(random.Random(2).choice(string.ascii_lowercase) * 4 for _ in range(10)),
    }
    for why, answer in wrong.items():
        ok, partial, reason = verdict(task, answer)
        assert not ok, (why, answer, reason)
        assert reason != "correct" and 0.0 <= partial < 1.0
        if why in ("empty", "zero", "absent", "bare number", "bare percent", "both directions", "opposite direction",
                   "negated", "the format example", "the question back", "random text"):
            assert partial == 0.0, (why, partial)


def test_for_debt_improved_says_no_direction_and_for_margins_it_does():
    measures = by_measure()
    debt, margin = measures["total debt"], measures["gross margin"]
    size = f"{abs(question(debt.ref).value):.1f}%"
    ok, _, reason = verdict(debt, f"Total debt improved by {size}.")
    assert not ok and "no direction" in reason
    word = "fell" if question(debt.ref).value < 0 else "rose"
    assert verdict(debt, f"Leverage improved: total debt {word} by {size}.")[0]  # "improved" is not read
    f = _forms(margin)
    assert verdict(margin, f"Gross margin {f['said']} by {f['size']} percentage points.")[0]


def test_a_change_quoting_its_levels_and_other_figures():
    task = by_measure()["gross margin"]
    c = question(task.ref).change
    f = _forms(task)
    levels = f"from {c.cited[0]:.2f}% to {c.cited[1]:.2f}%"
    assert judge_change(c, f"Gross margin {f['said']} by {f['size']} pp, {levels}.")[0]
    # a percentage that is neither the change nor a level: not credited, whatever else is right
    ok, partial, reason = judge_change(c, f"Gross margin {f['said']} by {f['size']} pp, {levels}, 99.9% of plan.")
    assert not ok and "neither" in reason and partial < 1
    # a money figure beside the change is the judge's business, not the exact check's
    assert judge_change(c, f"Gross margin {f['said']} by {f['size']} pp on revenue of $12.3 million.")[0]


def test_domains_carry_a_rubric_and_a_grade_item_only_for_conclusions():
    for d in DOMAINS:
        graded = d.name.split("/")[1].startswith("conclusion")
        assert bool(d.rubric) == graded and (d.grade_item is not None) == graded, d.name
    assert get_domain("finance/conclusion").rubric == RUBRIC
    assert get_rubric(RUBRIC).criteria == RUBRIC  # text, as a judge configured with it reads it


@pytest.mark.parametrize("name", NAMES)
def test_the_grade_item_has_the_question_the_answer_and_the_reference_with_its_figures(name):
    task = tasks(name, 1, seed=9)[0]
    q = question(task.ref)
    rep = report(decode_ref(task.ref)[0])
    answer = "Revenue grew by 3.0%."
    fmt = tool_format("compact", TOK)
    episode = Episode(task, 0, TOK.encode_prompt(task.prompt), 512, 1 << 30, fmt.parse, fmt.renderer, None)
    replay(episode, [answer], TOK)
    sample = episode.trajectory(TOK.decode(episode.token_ids))
    item = get_domain(name).grade_item(task, sample, VerifierContext(TOK))
    assert item.answer == answer and q.text in item.prompt and "<report>" not in item.prompt
    assert len(item.prompt) < 1500 and item.reference.startswith(task.answer)
    for key in q.cells:
        assert f"{rep.cells[key]:,}" in item.reference and rep.label(key) in item.reference
    text = messages(get_rubric(RUBRIC), item)[1]["content"]
    assert "<reference>" in text and task.answer in text and answer in text
