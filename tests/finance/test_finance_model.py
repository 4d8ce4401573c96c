"""The report model: statements that tie out across years, the altered figure of an inconsistency
question (the one figure that explains what breaks), and long reports of 100k+ tokens."""

from __future__ import annotations

import time

import pytest

from tempering.tasks.finance import words
from tempering.tasks.finance.layout import layout, markdown, tokens_estimate
from tempering.tasks.finance.model import generate, report
from tempering.tasks.finance.report import Report, Spec
from tempering.tasks.finance.tamper import label_key, tamper_candidates

SPECS = [Spec(seed, size) for size in ("brief", "short", "medium") for seed in range(4)] + [Spec(0, "long"),
                                                                                             Spec(1, "long")]


def _ids(spec: Spec) -> str:
    return f"{spec.size}-{spec.seed}"


@pytest.mark.parametrize("spec", SPECS, ids=_ids)
def test_statements_tie_out(spec):
    rep = report(spec)
    assert rep.broken() == [] and len(rep.identities) > 40 * len(rep.years) // 2
    first = rep.years[0]
    for y in rep.years:
        def v(table, row, col=str(y)):
            return rep.cells[(table, row, col)]

        # assets = liabilities + equity
        assert v("bs", "ta") == v("bs", "tl") + v("bs", "te") == v("bs", "tle")
        assert v("bs", "ta") == v("bs", "cash") + v("bs", "ar") + v("bs", "inv") + v("bs", "prepaid") + v(
            "bs", "ppe") + v("bs", "gw") + v("bs", "intang")
        # the income statement adds up; net income flows into the cash flow
        assert v("is", "ni") == v("is", "revenue") + sum(v("is", r) for r in (
            "cogs", "rd", "sga", "da", "interest", "other", "tax"))
        assert v("cf", "ni") == v("is", "ni")
        # the cash flow's ending cash is the balance sheet's cash
        assert v("cf", "end") == v("bs", "cash") == v("cf", "begin") + v("cf", "cfo") + v("cf", "cfi") + v("cf", "cff")
        # segments sum to revenue
        assert sum(v("seg-rev", f"s{i}") for i in range(len(rep.segments))) == v("is", "revenue")
        if "geo" in rep.tables:
            assert sum(v("geo", f"r{i}") for i in range(len(rep.regions))) == v("is", "revenue")
            assert sum(v("seg-oi", f"s{i}") for i in range(len(rep.segments))) + v("seg-oi", "corp") == v("is", "oi")
            assert v("debt", "total") == v("bs", "curdebt") + v("bs", "ltd")
            assert v("ppe", "net") == v("bs", "ppe")
        if y > first:
            p = str(y - 1)
            # net income (less dividends) flows to retained earnings; last year's cash opens this year
            assert v("bs", "re") == v("bs", "re", p) + v("is", "ni") + v("cf", "div")
            assert v("cf", "begin") == v("bs", "cash", p)
            assert v("cf", "d-inv") == -(v("bs", "inv") - v("bs", "inv", p))
    for table in (t for t in rep.tables if t.startswith("q")):
        for row in ("revenue", "gp", "ni"):
            quarters = [rep.cells[(table, row, f"Q{i}")] for i in range(1, 5)]
            assert sum(quarters) == rep.cells[(table, row, "FY")] == rep.cells[("is", row, table[1:])]
    # every figure the prose quotes is the table's
    assert all(i.residual(rep.cells) == 0 for i in rep.identities if i.name.startswith("the text quotes"))


def test_a_report_is_a_function_of_its_spec():
    a, b = generate(Spec(5, "medium")), generate(Spec(5, "medium"))
    assert a.cells == b.cells and a.body == b.body and a.identities == b.identities
    assert generate(Spec(6, "medium")).cells != a.cells
    assert report(Spec(5, "medium")) is report(Spec(5, "medium"))  # cached per process
    with pytest.raises(ValueError, match="report size"):
        Spec(1, "huge")


def _fixes(rep: Report, key) -> bool:
    """Would changing only `key` make every identity hold again?"""
    ids = [i for i in rep.identities if any(k == key for _, k in i.terms)]
    if not ids:
        return False
    coef = sum(c for c, k in ids[0].terms if k == key)
    residual = ids[0].residual(rep.cells)
    if residual % coef:
        return False
    cells = dict(rep.cells)
    cells[key] -= residual // coef
    return all(i.residual(cells) == 0 for i in rep.identities)


@pytest.mark.parametrize("size", ["brief", "short", "medium"])
def test_one_altered_figure_breaks_the_report_and_only_it_explains_what_breaks(size):
    clean = report(Spec(3, size))
    keys = set()
    for tamper in range(1, 5):
        rep = report(Spec(3, size, tamper))
        key = rep.tampered
        keys.add(key)
        assert {k for k in rep.cells if rep.cells[k] != clean.cells[k]} == {key}
        assert rep.original == clean.cells[key] != rep.cells[key]
        assert (rep.cells[key] > 0) == (rep.original > 0)  # a plausible figure: same sign
        broken = rep.broken()
        assert len(broken) >= 2 and all(any(k == key for _, k in i.terms) for i in broken)
        assert _fixes(rep, key)
        assert not [k for k in rep.cells if k != key and _fixes(rep, k)]
        # its label names it: no other row of any table has it
        labels = [label_key(r.label) for t in rep.tables.values() for r in t.rows]
        assert labels.count(label_key(rep.label(key))) == 1
    assert len(keys) > 1
    assert len(tamper_candidates(clean)) > 20


def test_a_long_report_has_100k_tokens_and_is_made_quickly():
    start = time.perf_counter()
    spec = Spec(11, "long")
    text = markdown(spec)
    seconds = time.perf_counter() - start
    rep = report(spec)
    assert tokens_estimate(text) >= 100_000 and seconds < 10
    assert len(rep.years) >= 8 and len(rep.segments) >= 8 and layout(spec).n_pages >= 60
    assert len(rep.identities) > 50 * len(rep.years) and rep.broken() == []


def test_reports_never_mention_what_unanswerable_questions_ask_for():
    for spec in [*SPECS, Spec(11, "long")]:
        text = markdown(spec).lower()
        assert not [w for w in words.ABSENT if w in text], spec
        rep = report(spec)
        assert not [s for s in words.SEGMENTS if s not in rep.segments and s.lower() in text]
        outside = (f"fiscal {rep.years[0] - 1}", f"fiscal {rep.years[-1] + 1}")
        assert not [w for w in outside if w in text]
