"""Questions about a report, their hidden answers, and judging an answer.

Seven families, each a function of the report and a seeded RNG (`build`): `extraction`, `ratios`
(with the definition given), `growth`, `multistep` (free cash flow, net debt, a CAGR, ...),
`inconsistency` (which line item was altered), `unanswerable` (the answer is the fixed phrase
`ABSENT`) and `conclusion` (checked by `conclusion`). A `Question` holds its answer and tolerance,
the figures it needs and the calculations of its reference.

`judge`: an answer with more than `MAX_FIGURES` figures is a list, not an answer; otherwise its
last figure counts, in the report's unit unless it writes a scale, within the question's
tolerance (half the last digit asked for); a line item is compared by its normalised label.
`partial` falls linearly from 1 to 0 as the error grows. No answer is near zero, so "0" is never
right."""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Callable

from tempering.tasks.finance import conclusion, words
from tempering.tasks.finance.calc import evaluate
from tempering.tasks.finance.formats import fmt_signed
from tempering.tasks.finance.report import Key, Report
from tempering.tasks.finance.tamper import label_key
from tempering.tasks.finance.numbers import answer_quantity, quantities

ABSENT = "not in the document"
FAMILIES = ("extraction", "ratios", "growth", "multistep", "inconsistency", "unanswerable", "conclusion")
PERCENT_TOL = 0.05  # percentage points: one decimal asked for
RATIO_TOL = 0.005  # two decimals asked for
MONEY_TOL = 0.5  # of the report's unit: the exact figure
MAX_FIGURES = 4  # an answer with more figures (years aside) is a list, not an answer


@dataclass(frozen=True)
class Question:
    family: str
    text: str
    kind: str  # "money" | "percent" | "ratio" | "label" | "absent" | "conclusion"
    value: float = 0.0  # money: in the report's unit; percent: in points; ratio: as is
    label: str = ""  # the altered line item (kind "label")
    tol: float = 0.0
    cells: tuple[Key, ...] = ()  # the figures a reader needs, in the order they are looked up
    steps: tuple[str, ...] = ()  # the reference's calculations; "{0}" is the result of the first
    searches: tuple[str, ...] = ()  # the reference's searches (unanswerable questions)
    ask: str = ""  # the form of answer the question asks for (its kind, unless it has no answer)
    change: conclusion.Change | None = None  # kind "conclusion": the measure's change and the reference

    @property
    def answer(self) -> str:
        """The answer as the reference gives it."""
        if self.kind == "money":
            return fmt_signed(round(self.value))
        if self.kind == "percent":
            return f"{self.value:.1f}%"
        if self.kind == "ratio":
            return f"{self.value:.2f}"
        if self.kind == "label":
            return self.label
        if self.kind == "conclusion":
            return self.change.statement
        return ABSENT

    def instructions(self, unit_phrase: str) -> str:
        """What form the answer takes (an unanswerable question asks as an answerable one would)."""
        return {"money": f"Give the amount in {unit_phrase}, as a number (an amount shown in parentheses is negative).",
                "percent": "Give a percentage rounded to one decimal place, with a % sign (negative for a decrease).",
                "ratio": "Give the ratio as a number rounded to two decimal places.",
                "label": "Answer with the line item's label exactly as printed in its table, and nothing else.",
                "conclusion": conclusion.INSTRUCTIONS,
                "number": "Give the number."}[self.ask or self.kind]


def _n(v: int) -> str:
    return f"({v})" if v < 0 else str(v)


def _where(rep: Report, key: Key) -> str:
    table = rep.tables[key[0]]
    label = rep.label(key)
    if table.when == "quarter":
        header = dict(table.columns)[key[2]]
        return f'"{label}" for {header} in the table "{table.title}"'
    if table.when == "end":
        return f'"{label}" at the end of fiscal {key[2]} in the table "{table.title}"'
    return f'"{label}" for fiscal {key[2]} in the table "{table.title}"'


def _money_keys(rep: Report, table: str) -> list[Key]:
    return [k for k in rep.cells if k[0] == table and rep.row(k).fmt == "money" and rep.cells[k] != 0]


# ---------------------------------------------------------------------------------------------
# The families


def extraction(rep: Report, rng: random.Random) -> Question:
    weights = {"is": 3, "bs": 3, "cf": 3}
    tables = [t for t in rep.tables if _money_keys(rep, t)]
    table = rng.choices(tables, [weights.get(t, 1) for t in tables])[0]
    key = rng.choice(sorted(_money_keys(rep, table)))
    return Question("extraction", f"What is {_where(rep, key)}?", "money", rep.cells[key], tol=MONEY_TOL, cells=(key,))


def _ratio_options(rep: Report, y: str) -> list[tuple]:
    c = lambda t, r: (t, r, y)  # noqa: E731
    v = rep.cells
    opts = [
        ("gross margin", "gross profit divided by revenue", "percent", [c("is", "gp"), c("is", "revenue")],
         "{0}/{1}*100"),
        ("operating margin", "operating income (loss) divided by revenue", "percent",
         [c("is", "oi"), c("is", "revenue")], "{0}/{1}*100"),
        ("net margin", "net income (loss) divided by revenue", "percent", [c("is", "ni"), c("is", "revenue")],
         "{0}/{1}*100"),
        ("current ratio", "total current assets divided by total current liabilities", "ratio",
         [c("bs", "tca"), c("bs", "tcl")], "{0}/{1}"),
        ("quick ratio", "cash and cash equivalents plus accounts receivable, divided by total current liabilities",
         "ratio", [c("bs", "cash"), c("bs", "ar"), c("bs", "tcl")], "({0}+{1})/{2}"),
        ("asset turnover", "revenue divided by total assets at the end of the year", "ratio",
         [c("is", "revenue"), c("bs", "ta")], "{0}/{1}"),
    ]
    if v[c("is", "ibt")] > 0:
        opts.append(("effective tax rate", "income tax expense divided by income before income taxes", "percent",
                     [c("is", "tax"), c("is", "ibt")], "-{0}/{1}*100"))
    if v[c("bs", "te")] > 0:
        opts.append(("debt-to-equity ratio", "total debt (the current portion of long-term debt plus long-term "
                     "debt) divided by total shareholders' equity", "ratio",
                     [c("bs", "curdebt"), c("bs", "ltd"), c("bs", "te")], "({0}+{1})/{2}"))
        opts.append(("return on equity", "net income (loss) divided by total shareholders' equity at the end of "
                     "the year", "percent", [c("is", "ni"), c("bs", "te")], "{0}/{1}*100"))
    if v[c("is", "interest")] != 0:
        opts.append(("interest coverage", "operating income (loss) divided by interest expense", "ratio",
                     [c("is", "oi"), c("is", "interest")], "-{0}/{1}"))
    return opts


def ratios(rep: Report, rng: random.Random) -> Question:
    y = str(rng.choice(rep.years))
    name, definition, kind, cells, expr = rng.choice(_ratio_options(rep, y))
    step = expr.format(*(_n(rep.cells[k]) for k in cells))
    value = float(evaluate(step))
    return Question("ratios", f"What was {rep.company}'s {name} in fiscal {y}, defined as {definition}?", kind, value,
                    tol=PERCENT_TOL if kind == "percent" else RATIO_TOL, cells=tuple(cells), steps=(step,))


def growth(rep: Report, rng: random.Random) -> Question:
    y = rng.choice(rep.years[1:])
    rows = [("is", "revenue"), ("is", "gp"), ("is", "oi"), ("is", "ni"), ("bs", "ta"), ("bs", "te"), ("bs", "inv"),
            ("bs", "ar"), ("cf", "cfo")]
    rows += [("seg-rev", r) for r in (f"s{i}" for i in range(len(rep.segments)))]
    if "geo" in rep.tables:
        rows += [("geo", f"r{i}") for i in range(len(rep.regions))]
    ok = [(t, r) for t, r in rows if rep.cells.get((t, r, str(y)), 0) > 0 and rep.cells.get((t, r, str(y - 1)), 0) > 0]
    t, r = rng.choice(ok)
    now, then = (t, r, str(y)), (t, r, str(y - 1))
    step = f"({rep.cells[now]}-{rep.cells[then]})/{rep.cells[then]}*100"
    table = rep.tables[t]
    text = (f'By what percentage did "{rep.label(now)}" in the table "{table.title}" change from fiscal {y - 1} to '
            f"fiscal {y}, relative to the fiscal {y - 1} amount?")
    return Question("growth", text, "percent", float(evaluate(step)), tol=PERCENT_TOL, cells=(then, now),
                    steps=(step,))


def _multistep_options(rep: Report, rng: random.Random) -> list[Callable[[], Question]]:
    years = rep.years
    y = str(rng.choice(years))
    v = rep.cells
    c = lambda t, r, col=y: (t, r, col)  # noqa: E731
    opts: list[Callable[[], Question]] = []

    def q(text: str, kind: str, cells: list[Key], steps: list[str]) -> Question:
        results: list[str] = []
        for s in steps:
            results.append(evaluate(s.format(*results)))
        tol = {"money": MONEY_TOL, "percent": PERCENT_TOL, "ratio": RATIO_TOL}[kind]
        return Question("multistep", text, kind, float(results[-1]), tol=tol, cells=tuple(cells),
                        steps=tuple(steps))

    def fcf() -> Question:
        cfo, capex = c("cf", "cfo"), c("cf", "capex")
        return q(f"What was the free cash flow in fiscal {y}, defined as net cash provided by (used in) operating "
                 "activities minus purchases of property, plant and equipment?", "money", [cfo, capex],
                 [f"{_n(v[cfo])}-{abs(v[capex])}"])

    def ebitda() -> Question:
        oi, da = c("is", "oi"), c("is", "da")
        return q(f"What was EBITDA in fiscal {y}, defined as operating income (loss) plus depreciation and "
                 "amortization?", "money", [oi, da], [f"{_n(v[oi])}+{abs(v[da])}"])

    def net_debt() -> Question:
        cur, ltd, cash = c("bs", "curdebt"), c("bs", "ltd"), c("bs", "cash")
        return q(f"What was the net debt at the end of fiscal {y}, defined as the current portion of long-term debt "
                 "plus long-term debt minus cash and cash equivalents?", "money", [cur, ltd, cash],
                 [f"{v[cur]}+{v[ltd]}", f"{{0}}-{v[cash]}"])

    def wc_change() -> Question:
        p = str(int(y) - 1)
        keys = [c("bs", "tca"), c("bs", "tcl"), c("bs", "tca", p), c("bs", "tcl", p)]
        return q(f"By how much did working capital (total current assets minus total current liabilities) change "
                 f"from the end of fiscal {p} to the end of fiscal {y}? A decrease is negative.", "money", keys,
                 [f"{v[keys[0]]}-{v[keys[1]]}", f"{v[keys[2]]}-{v[keys[3]]}", "{0}-{1}"])

    def cagr() -> Question:
        a, b = ("is", "revenue", str(years[0])), ("is", "revenue", str(years[-1]))
        k = len(years) - 1
        return q(f"What was the compound annual growth rate of revenue from fiscal {years[0]} to fiscal {years[-1]}, "
                 f"that is (revenue {years[-1]} / revenue {years[0]}) ** (1/{k}) - 1?", "percent", [a, b],
                 [f"({v[b]}/{v[a]})**(1/{k})", "({0}-1)*100"])

    def share() -> Question:
        i = rng.randrange(len(rep.segments))
        seg, total = c("seg-rev", f"s{i}"), c("seg-rev", "total")
        return q(f"What share of total revenue did the {rep.segments[i]} segment contribute in fiscal {y}, in "
                 "percent?", "percent", [seg, total], [f"{v[seg]}/{v[total]}*100"])

    def payout() -> Question:
        div, ni = c("cf", "div"), c("is", "ni")
        return q(f"What was the dividend payout ratio in fiscal {y}, defined as dividends paid divided by net "
                 "income?", "percent", [div, ni], [f"{abs(v[div])}/{v[ni]}*100"])

    def second_half() -> Question:
        qt = sorted(t for t in rep.tables if t.startswith("q"))[-1]
        year = qt[1:]
        q3, q4 = (qt, "revenue", "Q3"), (qt, "revenue", "Q4")
        return q(f"What was the revenue of the second half of fiscal {year} (the third and fourth quarters "
                 "together)?", "money", [q3, q4], [f"{v[q3]}+{v[q4]}"])

    def roe_average() -> Question:
        p = str(int(y) - 1)
        ni, te, te0 = c("is", "ni"), c("bs", "te"), c("bs", "te", p)
        return q(f"What was the return on average equity in fiscal {y}, defined as net income (loss) divided by the "
                 f"average of total shareholders' equity at the end of fiscal {p} and fiscal {y}?", "percent",
                 [ni, te0, te], [f"({v[te0]}+{v[te]})/2", f"{_n(v[ni])}/{{0}}*100"])

    opts += [fcf, ebitda, net_debt]
    if int(y) > years[0]:
        opts.append(wc_change)
        if v[c("bs", "te")] > 0 and v[c("bs", "te", str(int(y) - 1))] > 0:
            opts.append(roe_average)
    if len(years) >= 3 and v[("is", "revenue", str(years[0]))] > 0:
        opts.append(cagr)
    opts.append(share)
    if v[c("cf", "div")] < 0 and v[c("is", "ni")] > 0:
        opts.append(payout)
    if any(t.startswith("q") for t in rep.tables):
        opts.append(second_half)
    return opts


def multistep(rep: Report, rng: random.Random) -> Question:
    return rng.choice(_multistep_options(rep, rng))()


def inconsistency(rep: Report, rng: random.Random) -> Question:
    if rep.tampered is None:
        raise ValueError("an inconsistency question needs a report with an altered figure (Spec.tamper)")
    broken = [i for i in rep.broken() if not any(k[0] == "prose" for _, k in i.terms)]
    cells: list[Key] = []
    steps = []
    for ident in broken:
        cells += [k for _, k in ident.terms if k not in cells]
        expr = "".join(f"{'+' if c > 0 else '-'}{_n(rep.cells[k])}" for c, k in ident.terms)
        steps.append(expr.lstrip("+"))
    text = ("One figure in one of this report's tables was altered, so that the report no longer ties out: a total, "
            "a figure that should agree with another table, or a roll-forward from one year to the next no longer "
            "adds up. Which line item holds the altered figure?")
    return Question("inconsistency", text, "label", label=rep.label(rep.tampered), cells=tuple(cells),
                    steps=tuple(steps))


def unanswerable(rep: Report, rng: random.Random) -> Question:
    y = rng.choice(rep.years)
    kind = rng.choice(("absent", "absent", "year", "segment"))
    if kind == "absent":
        keyword = rng.choice(sorted(words.ABSENT))
        ask = "money" if keyword in ("market capitalization", "chief executive", "backlog") else "number"
        return Question("unanswerable", words.ABSENT[keyword].format(year=y), "absent", searches=(keyword,), ask=ask)
    if kind == "year":
        year = rng.choice((rep.years[0] - 1, rep.years[-1] + 1))
        label = rng.choice(("Revenue", "Net income (loss)", "Gross profit"))
        return Question("unanswerable", f'What was "{label}" in fiscal {year}?', "absent",
                        searches=(f"fiscal {year}",), ask="money")
    name = rng.choice([s for s in words.SEGMENTS if s not in rep.segments])
    return Question("unanswerable", f"What was the revenue of the {name} segment in fiscal {y}?", "absent",
                    searches=(name,), ask="money")


def conclusion_question(rep: Report, rng: random.Random) -> Question:
    c = conclusion.draw(rep, rng)
    return Question("conclusion", c.text, "conclusion", c.value, tol=c.tol, cells=c.cells, steps=c.steps, change=c)


BUILDERS: dict[str, Callable[[Report, random.Random], Question]] = {
    "extraction": extraction, "ratios": ratios, "growth": growth, "multistep": multistep,
    "inconsistency": inconsistency, "unanswerable": unanswerable, "conclusion": conclusion_question}


def build(rep: Report, family: str, seed: int) -> Question:
    """The question of `family` drawn with `seed`. A figure within 10 tolerances of zero is
    drawn again: "0" (a no-op) must never be a right answer."""
    rng = random.Random(f"tempering-finance-question/{family}/{seed}")
    for _ in range(100):
        q = BUILDERS[family](rep, rng)
        if q.kind not in ("money", "percent", "ratio", "conclusion") or abs(q.value) > 10 * q.tol:
            return q
    raise RuntimeError(f"no {family} question away from zero in report {rep.spec}")  # pragma: no cover


# ---------------------------------------------------------------------------------------------
# Judging an answer


def clean(text: str) -> str:
    """The answer without the wrapping models add: markdown emphasis, quotes, code marks, a
    leading "Answer:", a LaTeX \\boxed{...}."""
    text = text.strip()
    boxed = re.findall(r"\\boxed\{([^{}]*)\}", text)
    if boxed:
        text = boxed[-1]
    text = text.replace("**", "").replace("`", "").strip().strip("\"'“”").strip()
    text = re.sub(r"^(final\s+answer|answer)\s*[:\-]\s*", "", text, flags=re.I)
    return text.strip().strip("\"'“”").strip()


def judge(q: Question, text: str, scale: int) -> tuple[bool, float, str]:
    """Is `text` the answer to `q`? -> (right, partial credit in [0, 1], reason)."""
    answer = clean(text)
    if not answer:
        return False, 0.0, "empty answer"
    if q.kind in ("label", "absent"):
        want = q.label if q.kind == "label" else ABSENT
        ok = label_key(answer) == label_key(want) and bool(label_key(answer))
        return ok, float(ok), "correct" if ok else "wrong answer"
    if label_key(answer) == label_key(ABSENT):
        return False, 0.0, "said not in the document"
    if len([x for x in quantities(answer) if not x.bare_year]) > MAX_FIGURES:
        return False, 0.0, f"more than {MAX_FIGURES} figures: an answer gives one"
    if q.kind == "conclusion":
        return conclusion.judge(q.change, answer)
    got = answer_quantity(answer)
    if got is None:
        return False, 0.0, "no figure in the answer"
    if q.kind == "money":
        if got.percent or got.times:
            return False, 0.0, "a percentage or a multiple, not an amount"
        value = got.value / scale if got.scaled else got.value  # in the report's unit
    elif got.scaled or got.currency:
        return False, 0.0, "an amount, not a percentage or ratio"
    elif q.kind == "ratio" and got.percent:
        return False, 0.0, "a percentage, not a ratio"
    else:
        value = got.value
    err = abs(value - q.value)
    ok = err <= q.tol * (1 + 1e-9) + 1e-9
    reach = max(abs(q.value) * 0.1, q.tol * 20)
    partial = 1.0 if ok else max(0.0, 1.0 - err / reach)
    return ok, partial, "correct" if ok else f"off by {err:.6g}"
