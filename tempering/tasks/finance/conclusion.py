"""The `conclusion` questions: a written conclusion about how one measure of the company's
performance moved from one fiscal year to the next, and the exact check of such a conclusion.

Three measures, drawn with the question's seeded RNG (`draw`): revenue growth (the change in
percent of the earlier year's revenue), a margin's change (gross, operating or net margin, in
percentage points) and total debt's change (the current portion of long-term debt plus long-term
debt at the year's end, in percent). Only changes of more than `MIN_TOLS` tolerances are asked
about, so the direction never hangs on rounding. A `Change` holds the question, the signed change,
the figures a reader looks up and the reference's calculations, and the reference conclusion: one
sentence that states the direction, the change and the figures it rests on.

The exact check (`judge`) credits a conclusion only when it is unambiguous: it names one direction
(increased, rose, grew, improved, ... or decreased, fell, declined, deteriorated, ...; for debt,
"improved" and "deteriorated" say nothing), no negation or "unchanged" word anywhere (a negated
direction is not read, it is refused), and a percentage equal to the change within the tolerance
(one decimal; a margin's change may be written "2.4 points"). Every other percentage it writes
must be one of the figures the change rests on (a margin's two levels); a sign written on the change
must agree with the direction. It does not grade the prose (is it specific, are its other claims
supported): a judge with the domain's `RUBRIC` does that (`tempering.reward.graders`).
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Callable

from tempering.tasks.finance.calc import evaluate
from tempering.tasks.finance.formats import fmt_signed
from tempering.tasks.finance.numbers import Quantity, quantities
from tempering.tasks.finance.report import Key, Report

PERCENT_TOL = 0.05  # a change in percent: one decimal asked, one calculation
# A margin's change in points: one decimal asked, and a reader may subtract two margins that are
# each rounded to one decimal, which can be 0.1 off the change rounded once.
POINTS_TOL = 0.1
LEVEL_TOL = 0.05  # a margin's level quoted to one decimal
MIN_TOLS = 10  # only changes larger than this many tolerances are asked about

INSTRUCTIONS = ('Answer in one or two sentences, in the form "<measure> increased|decreased by N.N% from fiscal X '
                'to fiscal Y" (a margin\'s change in percentage points), with the change rounded to one decimal '
                "place; describe no other trend.")

RUBRIC = (
    "The task asks for a short written conclusion about how one measure of a company's performance moved "
    "between two fiscal years, from its annual report. The reference gives the correct conclusion and the "
    "report's figures it rests on. Grade the answer:\n"
    "- Direction: does it say clearly and correctly whether the measure increased or decreased (improved or "
    "deteriorated), without hedging or contradicting itself?\n"
    "- Magnitude: does it give the size of the change, in the unit asked for (percent, or percentage points for "
    "a margin), matching the reference to the decimal asked for?\n"
    "- Support: is every figure and claim in it supported by the report's figures given with the reference? "
    "A made-up cause, a trend of another measure, or a figure the report does not give counts against it.\n"
    "- Specific and concise: it names the measure and the years, in one or two sentences, without filler.\n"
    "10: right direction and magnitude, specific, nothing unsupported. 7-9: right, with a small flaw (a "
    "rounding slip in a quoted level, a vague word). 3-6: the direction right but the size wrong or missing, "
    "or an unsupported claim beside a right conclusion. 1-2: the direction wrong but the right measure "
    "discussed. 0: wrong, contradictory, no conclusion, or off-topic.")

_WORD = re.compile(r"[a-z]+(?:'[a-z]+)?")
UP = frozenset("increase increased increases increasing rise rises rose risen rising grow grows grew grown growing "
               "growth higher up expand expanded expands expanding expansion climb climbed climbs jump jumped "
               "jumps surged advanced widened gained".split())
DOWN = frozenset("decrease decreased decreases decreasing decline declined declines declining fall falls fell fallen "
                 "falling drop drops dropped lower lowered down shrink shrank shrunk shrinking contract contracted "
                 "contraction reduce reduced reduction narrowed slipped dipped compressed compression".split())
# better or worse: the direction of a measure where more is better (revenue, a margin); said of
# debt, they do not say which way it moved
GOOD = frozenset("improve improved improves improving improvement strengthened".split())
BAD = frozenset("deteriorate deteriorated deteriorates deteriorating deterioration worsen worsened worsening "
                "weakened eroded erosion".split())
# any of these makes a stated direction ambiguous ("did not increase", "remained flat"): refused
NEGATIONS = frozenset("not no never neither nor without none cannot instead rather unchanged flat stable steady "
                      "constant mixed".split())


@dataclass(frozen=True)
class Change:
    """One conclusion question: how a measure moved from one fiscal year to the next."""

    measure: str  # "revenue" | "gross margin" | "operating margin" | "net margin" | "total debt"
    text: str
    value: float  # the signed change: percent, or percentage points for a margin
    tol: float
    points: bool  # the change is in percentage points (a margin)
    cells: tuple[Key, ...]
    steps: tuple[str, ...]  # the reference's calculations; "{0}" is the result of the first
    cited: tuple[float, ...] = ()  # other percentages a conclusion may quote (a margin's two levels)
    statement: str = ""  # the reference conclusion

    @property
    def more_is_better(self) -> bool:  # then "improved" says which way it moved
        return self.measure != "total debt"


def _n(v: int) -> str:
    return f"({v})" if v < 0 else str(v)


def _run(steps: list[str]) -> list[float]:
    results: list[str] = []
    for s in steps:
        results.append(evaluate(s.format(*results)))
    return [float(r) for r in results]


def revenue(rep: Report, a: str, b: str) -> list[Change]:
    then, now = ("is", "revenue", a), ("is", "revenue", b)
    v0, v1 = rep.cells[then], rep.cells[now]
    if v0 <= 0:
        return []
    steps = [f"({v1}-{v0})/{v0}*100"]
    (g,) = _run(steps)
    text = (f"In one or two sentences, conclude whether {rep.company}'s revenue grew or declined from fiscal {a} to "
            f"fiscal {b}, and by how much in percent of the fiscal {a} revenue.")
    said = (f"Revenue {'grew' if g > 0 else 'declined'} by {abs(g):.1f}% from fiscal {a} to fiscal {b} (from "
            f"{fmt_signed(v0)} to {fmt_signed(v1)}, in {rep.unit_phrase}).")
    return [Change("revenue", text, g, PERCENT_TOL, False, (then, now), tuple(steps), statement=said)]


_MARGINS = (("gross margin", "gp", "gross profit divided by revenue"),
            ("operating margin", "oi", "operating income (loss) divided by revenue"),
            ("net margin", "ni", "net income (loss) divided by revenue"))


def margins(rep: Report, a: str, b: str) -> list[Change]:
    out = []
    for name, row, definition in _MARGINS:
        keys = [("is", row, a), ("is", "revenue", a), ("is", row, b), ("is", "revenue", b)]
        if rep.cells[keys[1]] <= 0 or rep.cells[keys[3]] <= 0:
            continue
        v = [rep.cells[k] for k in keys]
        steps = [f"{_n(v[0])}/{v[1]}*100", f"{_n(v[2])}/{v[3]}*100", "{1}-{0}"]
        m0, m1, d = _run(steps)
        text = (f"In one or two sentences, conclude whether {rep.company}'s {name} ({definition}) improved or "
                f"deteriorated from fiscal {a} to fiscal {b}, and by how many percentage points.")
        said = (f"{name.capitalize()} {'improved' if d > 0 else 'deteriorated'} by {abs(d):.1f} percentage points "
                f"from fiscal {a} to fiscal {b} (from {m0:.2f}% to {m1:.2f}% of revenue).")
        out.append(Change(name, text, d, POINTS_TOL, True, tuple(keys), tuple(steps), (m0, m1), said))
    return out


def debt(rep: Report, a: str, b: str) -> list[Change]:
    keys = [("bs", "curdebt", a), ("bs", "ltd", a), ("bs", "curdebt", b), ("bs", "ltd", b)]
    v = [rep.cells[k] for k in keys]
    if v[0] + v[1] <= 0:
        return []
    steps = [f"{v[0]}+{v[1]}", f"{v[2]}+{v[3]}", "({1}-{0})/{0}*100"]
    d0, d1, g = _run(steps)
    text = (f"In one or two sentences, conclude whether {rep.company}'s total debt (the current portion of long-term "
            f"debt plus long-term debt) rose or fell from the end of fiscal {a} to the end of fiscal {b}, and by how "
            f"much in percent of the fiscal {a} amount.")
    said = (f"Total debt {'rose' if g > 0 else 'fell'} by {abs(g):.1f}% from the end of fiscal {a} to the end of "
            f"fiscal {b} (from {fmt_signed(round(d0))} to {fmt_signed(round(d1))}, in {rep.unit_phrase}).")
    return [Change("total debt", text, g, PERCENT_TOL, False, tuple(keys), tuple(steps), statement=said)]


MEASURES: tuple[Callable[[Report, str, str], list[Change]], ...] = (revenue, margins, debt)


def draw(rep: Report, rng: random.Random) -> Change:
    """A measure drawn evenly among those with a change large enough to ask about, then one of its
    year pairs (and, for margins, which margin)."""
    kinds = list(MEASURES)
    rng.shuffle(kinds)
    pairs = [(str(a), str(b)) for a, b in zip(rep.years, rep.years[1:])]
    for make in kinds:
        options = [c for a, b in pairs for c in make(rep, a, b) if abs(c.value) > MIN_TOLS * c.tol]
        if options:
            return rng.choice(options)
    raise ValueError(f"no change large enough to conclude about in report {rep.spec}")  # pragma: no cover


# ---------------------------------------------------------------------------------------------
# Judging a conclusion


def direction(change: Change, text: str) -> tuple[int, str]:
    """The direction a conclusion states: +1, -1, or 0 with why none can be read."""
    words = _WORD.findall(text.lower())
    negated = sorted({w for w in words if w in NEGATIONS or w.endswith("n't")})
    if negated:
        return 0, f"ambiguous: {negated[0]!r} (a negated or flat direction is not read)"
    up, down = UP, DOWN
    if change.more_is_better:
        up, down = up | GOOD, down | BAD
    said = {+1 for w in words if w in up} | {-1 for w in words if w in down}
    if len(said) != 1:
        return 0, "states both an increase and a decrease" if said else "states no direction (increased or decreased)"
    return said.pop(), ""


def _percentages(change: Change, text: str) -> list[Quantity]:
    if change.points:  # "2.4 points", "2.4 pts": percentage points, as "2.4 pp" is read
        text = re.sub(r"(\d)\s*(?:points?|pts?)\b", r"\1 pp", text, flags=re.I)
    return [q for q in quantities(text) if q.percent]


def judge(change: Change, answer: str) -> tuple[bool, float, str]:
    """Does the conclusion `answer` (cleaned) state the change's direction and size? -> (right,
    partial credit in [0, 1], reason). Partial credit needs the right direction: then it falls
    linearly from 1 to 0 at an error of 10% of the change (or 20 tolerances, if larger)."""
    sign, why = direction(change, answer)
    if not sign:
        return False, 0.0, why
    if (sign > 0) != (change.value > 0):
        return False, 0.0, f"wrong direction: it {'increased' if change.value > 0 else 'decreased'}"
    found = _percentages(change, answer)
    unit = "percentage points" if change.points else "a percentage"
    if not found:
        return False, 0.0, f"no change given as {unit}"
    hits = [q for q in found if abs(abs(q.value) - abs(change.value)) <= change.tol * (1 + 1e-9) + 1e-9]
    others = [q for q in found if q not in hits and not any(abs(q.value - c) <= LEVEL_TOL + 1e-9
                                                            for c in change.cited)]
    reach = max(abs(change.value) * 0.1, change.tol * 20)
    if not hits and not others:
        return False, 0.0, f"quotes the margins but gives no change in {unit}"
    if not hits:
        err = min(abs(abs(q.value) - abs(change.value)) for q in others)
        return False, max(0.0, 1.0 - err / reach), f"the change is off by {err:.3g}"
    if others:  # a hedge: credit diluted by the candidates it lists
        why = f"a percentage that is neither the change nor a figure it rests on: {others[0].text}"
        return False, 1.0 / len(found), why
    if any((q.value < 0 and sign > 0) or (q.text.startswith("+") and sign < 0) for q in hits):
        return False, 0.5, "the change's sign contradicts the stated direction"
    return True, 1.0, "correct"
