"""Reading answers: figures with units, scales, signs, parentheses and percentages; the safe
calculator; judging an answer against a question's tolerance."""

from __future__ import annotations

import pytest

from tempering.tasks.finance.calc import CalcError, evaluate
from tempering.tasks.finance.numbers import answer_quantity, parse_quantity, quantities
from tempering.tasks.finance.questions import ABSENT, Question, clean, judge


@pytest.mark.parametrize("text, value, scaled, percent", [
    ("(1,234.5)", -1234.5, False, False),
    ("-$1.2m", -1.2e6, True, False),
    ("$-1.2m", -1.2e6, True, False),
    ("($1.2m)", -1.2e6, True, False),
    ("$(1.2) million", -1.2e6, True, False),
    ("12.5%", 12.5, False, True),
    ("-3.4 percent", -3.4, False, True),
    ("+5.2 pp", 5.2, False, True),
    ("1.3 percentage points", 1.3, False, True),
    ("1.2 billion", 1.2e9, True, False),
    ("1.2bn", 1.2e9, True, False),
    ("USD 3,400", 3400, False, False),
    ("3,400 USD", 3400, False, False),
    ("US$3,400", 3400, False, False),
    ("€2.5k", 2500, True, False),
    ("3.4e6", 3.4e6, False, False),
    ("−1,234", -1234, False, False),
    ("1,234,567", 1234567, False, False),
    (".5", 0.5, False, False),
    ("2 thousand", 2000, True, False),
    ("7 mln", 7e6, True, False),
])
def test_figures_with_units_scales_signs_and_percentages(text, value, scaled, percent):
    q = parse_quantity(text)
    assert q is not None and q.value == pytest.approx(value) and q.scaled == scaled and q.percent == percent


def test_what_is_not_one_figure():
    assert parse_quantity("1,2345") is None  # not a thousands separator
    assert parse_quantity("twelve") is None and parse_quantity("") is None
    assert parse_quantity("12 and 13") is None
    assert parse_quantity("1.85x").times and parse_quantity("1.85 times").times
    q = parse_quantity("5 m")  # a detached "m" without a currency may be metres: no scale
    assert q is not None and not q.scaled and parse_quantity("$5 m").scaled
    assert [x.value for x in quantities("FY2023 Q3: 12")] == [12]  # figures inside words are not figures
    # an answer's figure is its last one that is not a bare year
    assert answer_quantity("In 2023 revenue was $1.2m, in 2023.").value == 1.2e6
    assert answer_quantity("2023").value == 2023
    assert answer_quantity("no figure") is None
    assert clean("**Answer:** `41.2%`") == "41.2%" and clean(r"the answer is \boxed{-3.5\%}") == r"-3.5\%"


def money(value, tol=0.5):
    return Question("extraction", "?", "money", value, tol=tol)


def test_judging_amounts_percentages_ratios_and_labels():
    thousand = 1000
    q = money(-1234)  # the report is in thousands
    for answer in ("-1,234", "(1,234)", "$(1,234) thousand", "-$1.234 million", "-1.234m", "-1234.4",
                   "Answer: -1,234", "The figure is (1,234).", "-1,234 (in thousands, fiscal 2023)"):
        assert judge(q, answer, thousand)[0], answer
    for answer in ("1,234", "-1,235", "-1.2 million", "-1,234%", "-1,234x", ABSENT, "", "n/a",
                   "-1,234 -1,234 -1,234 -1,234 -1,234"):
        assert not judge(q, answer, thousand)[0], answer
    ok, partial, _ = judge(q, "-1,240", thousand)
    assert not ok and 0 < partial < 1 and judge(q, "0", thousand)[1] == 0
    pct = Question("growth", "?", "percent", 12.3456, tol=0.05)
    for answer in ("12.3%", "12.35", "12.3 percent", "+12.3%"):
        assert judge(pct, answer, thousand)[0], answer
    for answer in ("12.2%", "0.123", "-12.3%", "$12.3", "12.3 million", "12"):
        assert not judge(pct, answer, thousand)[0], answer
    ratio = Question("ratios", "?", "ratio", 1.8549, tol=0.005)
    assert judge(ratio, "1.85", thousand)[0] and judge(ratio, "1.85x", thousand)[0]
    assert not judge(ratio, "185%", thousand)[0] and not judge(ratio, "1.8", thousand)[0]
    label = Question("inconsistency", "?", "label", label="Prepaid expenses and other current assets")
    assert judge(label, "prepaid expenses and other current assets.", thousand)[0]
    assert judge(label, "**Prepaid Expenses and Other Current Assets** (2023)", thousand)[0]
    assert not judge(label, "Prepaid expenses", thousand)[0] and not judge(label, "Inventories", thousand)[0]
    absent = Question("unanswerable", "?", "absent")
    assert judge(absent, "Not in the document.", thousand)[0] and judge(absent, ABSENT, thousand)[0]
    assert not judge(absent, "0", thousand)[0] and not judge(absent, "It is not in the document, but 5", thousand)[0]


@pytest.mark.parametrize("expression, value", [
    ("1+2", "3"), ("1200/3400", "0.352941176471"), ("(5314-5027)/5027*100", "5.70917047941"), ("0.1+0.2", "0.3"),
    ("2**10", "1024"), ("-(3)", "-3"), ("1,234,567 + 1", "1234568"), ("12.5% * 200", "25"), ("3^2", "9"),
    ("10**-3", "0.001"), ("(1.5)**(1/3)", "1.14471424255"), ("$1,000 / 4", "250"), ("1e-9", "1e-9"),
    ("7/3", "2.33333333333"), ("2 × 3 − 1", "5"), ("123456789012345678901234567890123", "1.23456789012e32"),
])
def test_the_calculator_computes_arithmetic_exactly(expression, value):
    assert evaluate(expression) == value


@pytest.mark.parametrize("expression, why", [
    ("__import__('os').system('true')", "function calls"), ("(1).real", "attribute access"),
    ("abs(-1)", "function calls"),
    ("x + 1", "names"), ("[1][0]", "subscripts"), ("1 if 1 else 2", "conditional"), ("1 < 2", "comparisons"),
    ("'a' * 3", "numbers"), ("1 // 2", "FloorDiv"), ("~1", "Invert"), ("lambda: 1", "lambdas"),
    ("2**100000", "exponent"), ("9**9**9", "exponent"), ("10**999 * 10**999 * 10**999 * 10**999", "too large"),
    ("2**-2000", "exponent"), ("(-8)**(1/3)", "negative number"), ("1/0", "division by zero"), ("0**-1", "division"),
    ("1" * 41, "too long"), ("-" * 300 + "1", "too complex"), ("1+" * 300 + "1", "too long"), ("", "no expression"),
    ("1,2", "tuples"), ("1 +", "cannot read"), ("(" * 210 + "1" + ")" * 210, "cannot read"),
])
def test_the_calculator_refuses_anything_but_arithmetic_within_limits(expression, why):
    with pytest.raises(CalcError, match=why):
        evaluate(expression)
