"""The report model: a seeded company whose statements tie out, as tables of figures and the
identities between them.

`generate(Spec)` simulates a company year by year (segments, costs, working capital, capital
spending, acquisitions, debt tranches, dividends, buy-backs) from a hidden opening balance sheet,
and writes what an annual report shows: the income statement, balance sheet and cash-flow
statement for every reported year, segment and geographic tables, notes (inventories, PP&E,
depreciation, goodwill, debt, taxes, quarterly results) and prose that quotes some figures.
Every figure is an integer in the report's unit (thousands or millions of US dollars; cents
for per-share amounts, tenths of a percent for rates) stored once under its `Key` (table, row,
column); tables and prose refer to keys.

`Report.identities` are the linear equations the figures satisfy: totals, cross-references
between statements and notes, roll-forwards from one year to the next (net income into
retained earnings, the cash flow's ending cash into the balance sheet, capital spending into
gross PP&E), assets = liabilities + equity, segments and regions summing to revenue, quarters
to the year, and each figure the prose quotes. An identity is listed only when all its figures
are shown. `Spec.tamper` alters one figure after the fact: one whose identities no other single
figure shares, so exactly one figure explains the identities that break (`tamper_candidates`).
"""

from __future__ import annotations

import math
import random
import re
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable, Union

from tempering.tasks.finance import words

Key = tuple[str, str, str]  # (table, row, column); prose quotes are ("prose", "m<i>", "")

UNITS = {"thousands": 1_000, "millions": 1_000_000}

# Per size: (low, high) ranges drawn per report. `quarters`: how many of the latest years have a
# quarterly table (0 = all); `risks` risk factors of `risk_paragraphs` paragraphs each;
# `mdna_segments`: the discussion covers every pair of years and every segment (else the latest
# pair only); `notes`: the notes are printed (a brief report has the statements and segments only,
# on about two pages); `target_chars`: risk factors are added until the markdown is at least this
# long (long reports: 100k+ tokens at ~4 characters a token).
SIZES: dict[str, dict[str, Any]] = {
    "brief": dict(years=(2, 2), segments=(2, 2), regions=(3, 3), quarters=1, risks=(0, 0), risk_paragraphs=(1, 1),
                  mdna_segments=False, policies=False, notes=False, target_chars=0),
    "short": dict(years=(2, 3), segments=(2, 3), regions=(3, 3), quarters=1, risks=(1, 2), risk_paragraphs=(1, 1),
                  mdna_segments=False, policies=False, notes=True, target_chars=0),
    "medium": dict(years=(3, 5), segments=(3, 5), regions=(4, 6), quarters=2, risks=(2, 4), risk_paragraphs=(1, 2),
                   mdna_segments=True, policies=True, notes=True, target_chars=0),
    "long": dict(years=(8, 10), segments=(8, 12), regions=(12, 20), quarters=0, risks=(10, 10), risk_paragraphs=(3, 6),
                 mdna_segments=True, policies=True, notes=True, target_chars=440_000),
}


@dataclass(frozen=True)
class Spec:
    """A report by reference: its seed and size, and which figure (if any) is altered."""

    seed: int
    size: str = "short"
    tamper: int = 0  # 0: the report ties out; otherwise the seed of the choice of the altered figure

    def __post_init__(self) -> None:
        if self.size not in SIZES:
            raise ValueError(f"report size {self.size!r}: one of {', '.join(SIZES)}")


@dataclass(frozen=True)
class Row:
    key: str
    label: str
    style: str = ""  # "": a line item; "sub": a subtotal; "total"; "head": a caption without figures
    fmt: str = "money"  # "money" (the report's unit), "eps" (cents), "shares" (thousands), "rate" (0.1%)


@dataclass(frozen=True)
class Table:
    key: str
    title: str
    caption: str  # "(in thousands of US dollars)"
    columns: tuple[tuple[str, str], ...]  # (column key, header), in display order
    rows: tuple[Row, ...]
    when: str = "year"  # "year" (flows over a fiscal year), "end" (balances at its end), "quarter"


@dataclass(frozen=True)
class Heading:
    text: str
    level: int  # 0: the cover's title; 1: a section; 2: a subsection


@dataclass(frozen=True)
class Para:
    text: str


@dataclass(frozen=True)
class PageBreak:
    pass


@dataclass(frozen=True)
class Contents:
    """The table of contents: the level-1 headings and their pages (filled in by the layout)."""


Block = Union[Heading, Para, Table, PageBreak, Contents]


@dataclass(frozen=True)
class Identity:
    name: str
    terms: tuple[tuple[int, Key], ...]  # sum(coef * figure) == 0

    def residual(self, cells: dict[Key, int]) -> int:
        return sum(c * cells[k] for c, k in self.terms)


@dataclass
class Report:
    spec: Spec
    company: str
    unit: str  # "thousands" | "millions"
    years: tuple[int, ...]  # ascending
    segments: tuple[str, ...]
    regions: tuple[str, ...]
    body: tuple[Block, ...]
    tables: dict[str, Table]
    cells: dict[Key, int]
    identities: tuple[Identity, ...]
    tampered: Key | None = None
    original: int | None = None  # the altered figure's true value

    @property
    def scale(self) -> int:
        return UNITS[self.unit]

    @property
    def unit_phrase(self) -> str:
        return f"{self.unit} of US dollars"

    def value(self, key: Key) -> int:
        return self.cells[key]

    def row(self, key: Key) -> Row:
        return next(r for r in self.tables[key[0]].rows if r.key == key[1])

    def label(self, key: Key) -> str:
        return self.row(key).label

    def broken(self) -> list[Identity]:
        return [i for i in self.identities if i.residual(self.cells) != 0]


# ---------------------------------------------------------------------------------------------
# Formatting (shared by the tables, the prose and the answers)


def fmt_value(v: int | None, fmt: str = "money") -> str:
    """A figure as the tables print it: thousands separators, negatives in parentheses, zero "-"."""
    if v is None:
        return "n/m"
    if fmt == "eps":
        s = f"{abs(v) / 100:,.2f}"
    elif fmt == "rate":
        return f"{v / 10:.1f}%"
    else:
        if v == 0:
            return "-"
        s = f"{abs(v):,}"
    return f"({s})" if v < 0 else s


def fmt_signed(v: int) -> str:
    """A figure as an answer gives it: thousands separators and a minus sign."""
    return f"{v:,}"


def money_words(v: int, unit: str) -> str:
    """A figure as the prose quotes it: "$1,234 thousand"."""
    return f"${abs(v):,} {unit[:-1]}"


# ---------------------------------------------------------------------------------------------
# The simulation


class _Sim:
    """One company's years 0..n (0 is the hidden opening year) as plain lists."""

    def __init__(self, rng: random.Random, n: int, n_segments: int, n_regions: int, unit: str, first_year: int):
        self.rng, self.n = rng, n
        R = range(n + 1)
        u = rng.uniform
        big = unit == "thousands"
        rev0 = rng.randint(150_000, 4_000_000) if big else rng.randint(1_500, 60_000)
        # segments: each its own trend
        weights = [u(0.5, 2.0) for _ in range(n_segments)]
        trend = [u(-0.03, 0.12) for _ in range(n_segments)]
        self.seg = [[max(1, round(rev0 * w / sum(weights)))] for w in weights]
        for t in range(1, n + 1):
            for s in range(n_segments):
                g = min(0.5, max(-0.3, trend[s] + rng.gauss(0, 0.06)))
                self.seg[s].append(max(1, round(self.seg[s][-1] * (1 + g))))
        self.rev = [sum(self.seg[s][t] for s in range(n_segments)) for t in R]
        rev = self.rev
        c, r, s_ = u(0.45, 0.65), u(0.02, 0.10), u(0.10, 0.20)
        self.cogs = [round(rev[t] * (c + rng.gauss(0, 0.015))) for t in R]
        self.gp = [rev[t] - self.cogs[t] for t in R]
        self.rd = [round(rev[t] * (r + rng.gauss(0, 0.004))) for t in R]
        self.sga = [round(rev[t] * (s_ + rng.gauss(0, 0.006))) for t in R]
        self.sbc = [round(rev[t] * u(0.005, 0.02)) for t in R]
        self.other = [round(rev[t] * rng.gauss(0, 0.002)) for t in R]
        # working capital
        dso, dio, dpo = u(35, 75), u(40, 110), u(30, 70)
        pre, acc = u(0.01, 0.03), u(0.03, 0.07)
        self.ar = [round(rev[t] * (dso + rng.gauss(0, 3)) / 365) for t in R]
        self.inv = [round(self.cogs[t] * (dio + rng.gauss(0, 5)) / 365) for t in R]
        self.prepaid = [round(rev[t] * (pre + rng.gauss(0, 0.002))) for t in R]
        self.ap = [round(self.cogs[t] * (dpo + rng.gauss(0, 3)) / 365) for t in R]
        self.accrued = [round(rev[t] * (acc + rng.gauss(0, 0.003))) for t in R]
        self.oltl = [round(rev[0] * u(0.02, 0.08))]
        for t in range(1, n + 1):
            self.oltl.append(max(0, self.oltl[-1] + round(rev[t] * rng.gauss(0.002, 0.004))))
        # long-lived assets
        self.ppe = [round(rev[0] * u(0.2, 0.5))]
        self.gross = [round(self.ppe[0] / u(0.45, 0.7))]
        self.ad = [self.gross[0] - self.ppe[0]]
        self.intang = [round(rev[0] * u(0.02, 0.12))]
        self.gw = [round(rev[0] * u(0.05, 0.4))]
        owners = rng.sample(range(n_segments), max(1, n_segments // 2))
        share = [u(0.5, 2.0) if s in owners else 0.0 for s in range(n_segments)]
        self.gw_seg = [[0] for _ in range(n_segments)]
        left = self.gw[0]
        for i, s in enumerate(owners):
            part = left if i == len(owners) - 1 else round(self.gw[0] * share[s] / sum(share))
            self.gw_seg[s][0] = part
            left -= part
        dep_rate, amort_rate, capex_rate = u(0.08, 0.14), u(0.10, 0.18), u(0.03, 0.08)
        self.dep, self.amort, self.capex, self.acq, self.da = [0], [0], [0], [0], [0]
        # debt: a term loan, senior notes, a revolving facility drawn when cash runs low
        year0 = first_year - 1
        self.tranches: list[dict] = []
        term = round(rev[0] * u(0.05, 0.25))
        instalment = max(1, math.ceil(term / rng.randint(5, 8)))
        self.tranches.append(dict(label=f"Term loan due {year0 + math.ceil(term / instalment)}",
                                  rate=u(0.035, 0.065), bal=[term], kind="term", due=None))
        labels = set()
        for _ in range(rng.randint(1, 2)):
            self._note(year0, round(rev[0] * u(0.05, 0.2)), year0 + rng.randint(1, 12), labels, opening=True)
        self.tranches.append(dict(label="Revolving credit facility", rate=u(0.05, 0.07), bal=[0], kind="revolver",
                                  due=None))
        self.debt = [sum(tr["bal"][0] for tr in self.tranches)]
        # cash and equity at the opening
        self.cash = [round(rev[0] * u(0.06, 0.2))]
        ta = self._assets(0)
        tl = self.ap[0] + self.accrued[0] + self.debt[0] + self.oltl[0]
        if ta - tl < 0.25 * ta:
            self.cash[0] += round(0.25 * ta - (ta - tl)) + 1
            ta = self._assets(0)
        equity = ta - tl
        self.apic = [round(equity * u(0.2, 0.6))]
        self.re = [equity - self.apic[0]]
        self.interest, self.oi, self.ibt, self.tax, self.ni = [0], [0], [0], [0], [0]
        self.borrow, self.repay, self.div, self.rep, self.cfo, self.cfi, self.cff = [0], [0], [0], [0], [0], [0], [0]
        payout = 0.0 if rng.random() < 0.3 else u(0.1, 0.4)
        buyback = rng.random() < 0.5
        tax_rate = u(0.18, 0.27)
        self.tax_parts = [(0, 0, 0)]
        for t in range(1, n + 1):
            year = year0 + t
            self.dep.append(round(self.ppe[t - 1] * (dep_rate + rng.gauss(0, 0.005))))
            self.amort.append(min(self.intang[t - 1], round(self.intang[t - 1] * amort_rate)))
            self.da.append(self.dep[t] + self.amort[t])
            self.capex.append(round(rev[t] * (capex_rate + rng.gauss(0, 0.005))))
            acq_gw = acq_int = 0
            if rng.random() < 0.3:
                acq_gw = round(rev[t] * u(0.02, 0.12))
                acq_int = round(acq_gw * u(0.3, 0.6))
                s = rng.randrange(n_segments)
                for k in range(n_segments):
                    self.gw_seg[k].append(self.gw_seg[k][-1] + (acq_gw if k == s else 0))
            else:
                for k in range(n_segments):
                    self.gw_seg[k].append(self.gw_seg[k][-1])
            self.acq.append(acq_gw + acq_int)
            self.gw.append(self.gw[-1] + acq_gw)
            self.intang.append(self.intang[-1] + acq_int - self.amort[t])
            self.ppe.append(self.ppe[-1] + self.capex[t] - self.dep[t])
            self.gross.append(self.gross[-1] + self.capex[t])
            self.ad.append(self.ad[-1] + self.dep[t])
            # the income statement
            self.interest.append(round(sum(tr["bal"][t - 1] * tr["rate"] for tr in self.tranches)))
            self.oi.append(self.gp[t] - self.rd[t] - self.sga[t] - self.da[t])
            self.ibt.append(self.oi[t] - self.interest[t] + self.other[t])
            tax = round(self.ibt[t] * (tax_rate + rng.gauss(0, 0.01))) if self.ibt[t] > 0 else round(rev[t] * 0.002)
            self.tax.append(tax)
            foreign, state = round(tax * u(0.1, 0.4)), round(tax * u(0.05, 0.15))
            self.tax_parts.append((tax - foreign - state, state, foreign))
            self.ni.append(self.ibt[t] - tax)
            # the cash flow
            self.cfo.append(self.ni[t] + self.da[t] + self.sbc[t] - (self.ar[t] - self.ar[t - 1])
                            - (self.inv[t] - self.inv[t - 1]) - (self.prepaid[t] - self.prepaid[t - 1])
                            + (self.ap[t] - self.ap[t - 1]) + (self.accrued[t] - self.accrued[t - 1])
                            + (self.oltl[t] - self.oltl[t - 1]))
            self.cfi.append(-self.capex[t] - self.acq[t])
            issued = repaid = 0
            for tr in self.tranches:
                bal = tr["bal"][t - 1]
                if tr["kind"] == "term":
                    pay = min(instalment, bal)
                elif tr["kind"] == "note" and tr["due"] == year:
                    pay = bal
                else:
                    pay = 0
                tr["bal"].append(bal - pay)
                repaid += pay
            if rng.random() < 0.2:
                issued = self._note(year, round(rev[t] * u(0.05, 0.15)), year + rng.randint(5, 10), labels)
            self.div.append(round(max(self.ni[t], 0) * payout))
            self.rep.append(min(round(rev[t] * u(0.0, 0.03)) if buyback else 0,
                                max(0, self.apic[-1] + self.sbc[t] - self.apic[0] // 3)))
            cash = self.cash[-1] + self.cfo[t] + self.cfi[t] + issued - repaid - self.div[t] - self.rep[t]
            revolver = self.tranches[[tr["kind"] for tr in self.tranches].index("revolver")]
            low, high = round(rev[t] * 0.04), round(rev[t] * 0.25)
            if cash < low:
                draw = low - cash + round(rev[t] * u(0.01, 0.04))
                revolver["bal"][t] += draw
                issued += draw
                cash += draw
            elif cash > high and revolver["bal"][t] > 0:
                pay = min(revolver["bal"][t], cash - round(rev[t] * 0.15))
                revolver["bal"][t] -= pay
                repaid += pay
                cash -= pay
            self.borrow.append(issued)
            self.repay.append(repaid)
            self.cff.append(issued - repaid - self.div[t] - self.rep[t])
            self.cash.append(cash)
            self.debt.append(sum(tr["bal"][t] for tr in self.tranches))
            self.apic.append(self.apic[-1] + self.sbc[t] - self.rep[t])
            self.re.append(self.re[-1] + self.ni[t] - self.div[t])
        # the current portion of debt: what falls due in the next year
        self.current = []
        for t in R:
            due = 0
            for tr in self.tranches:
                if tr["kind"] == "term":
                    due += min(instalment, tr["bal"][t])
                elif tr["kind"] == "note" and tr["due"] == year0 + t + 1:
                    due += tr["bal"][t]
            self.current.append(due)
        # shares and earnings per share
        shares = round(rev[0] * UNITS[unit] / u(20, 200) / 1000)  # in thousands: revenue of $20-200 a share
        self.shares = []
        for t in R:
            shares = round(shares * (1 + rng.gauss(-0.005, 0.01)))
            self.shares.append(shares)
        scale = UNITS[unit]
        self.eps = [round(self.ni[t] * scale * 100 / (self.shares[t] * 1000)) for t in R]
        # segment operating income: the consolidated figure less corporate costs, shared by margin
        margin = [u(0.05, 0.3) for _ in range(n_segments)]
        self.corp = [-round(rev[t] * u(0.01, 0.03)) for t in R]
        self.seg_oi = [[0] * (n + 1) for _ in range(n_segments)]
        for t in range(1, n + 1):
            pool = self.oi[t] - self.corp[t]
            w = [self.seg[s][t] * (margin[s] + rng.gauss(0, 0.02)) for s in range(n_segments)]
            self._split(pool, w, self.seg_oi, t)
        # regions
        rw = [u(0.5, 3.0) for _ in range(n_regions)]
        self.geo = [[0] * (n + 1) for _ in range(n_regions)]
        for t in range(1, n + 1):
            rw = [max(0.2, x * (1 + rng.gauss(0, 0.05))) for x in rw]
            self._split(rev[t], rw, self.geo, t)
        # inventory composition, PP&E by class
        raw, wip = u(0.2, 0.35), u(0.1, 0.25)
        self.inv_parts = [(round(self.inv[t] * raw), round(self.inv[t] * wip)) for t in R]
        classes = [u(0.04, 0.1), u(0.25, 0.35), u(0.05, 0.12), u(0.03, 0.08)]  # land, buildings, IT, CIP
        self.ppe_parts = []
        for t in R:
            parts = [round(self.gross[t] * max(0.01, c + rng.gauss(0, 0.005))) for c in classes]
            self.ppe_parts.append(parts)  # machinery and equipment is the rest
        # quarters
        season = [u(0.2, 0.3) for _ in range(4)]
        self.quarters: dict[int, dict[str, list[int]]] = {}
        for t in range(1, n + 1):
            w = [x * (1 + rng.gauss(0, 0.05)) for x in season]
            q = {"revenue": self._parts(rev[t], w), "gp": self._parts(self.gp[t], w),
                 "ni": self._parts(self.ni[t], [x * (1 + rng.gauss(0, 0.2)) for x in w])}
            self.quarters[t] = q

    def _note(self, year: int, amount: int, due: int, labels: set, opening: bool = False) -> int:
        """Issue senior notes of `amount` in `year` (at the opening, or in the year being simulated)."""
        while True:
            rate = round(self.rng.uniform(2.5, 6.5) * 8) / 8
            label = f"{rate:.3f}".rstrip("0").rstrip(".") + f"% senior notes due {due}"
            if label not in labels:
                break
            due += 1
        labels.add(label)
        issued_at = 0 if opening else len(self.cash)  # the simulation index of `year`
        tr = dict(label=label, rate=rate / 100, bal=[0] * issued_at + [amount], kind="note", due=due)
        # before the revolver, which is always last
        self.tranches.insert(len(self.tranches) if opening else len(self.tranches) - 1, tr)
        return amount

    def _assets(self, t: int) -> int:
        return (self.cash[t] + self.ar[t] + self.inv[t] + self.prepaid[t] + self.ppe[t] + self.gw[t]
                + self.intang[t])

    @staticmethod
    def _parts(total: int, weights: list[float]) -> list[int]:
        out = [round(total * w / sum(weights)) for w in weights[:-1]]
        return out + [total - sum(out)]

    def _split(self, total: int, weights: list[float], into: list[list[int]], t: int) -> None:
        for s, v in enumerate(self._parts(total, weights)):
            into[s][t] = v


# ---------------------------------------------------------------------------------------------
# The report: tables, identities, prose


class _Builder:
    def __init__(self, report_unit: str):
        self.unit = report_unit
        self.tables: dict[str, Table] = {}
        self.cells: dict[Key, int] = {}
        self.identities: list[Identity] = []
        self.mentions = 0

    def table(self, key: str, title: str, columns: list[tuple[str, str]], rows: list[tuple[Row, dict[str, int | None]]],
              when: str = "year", caption: str | None = None) -> Table:
        for row, values in rows:
            for col, v in values.items():
                if v is not None:
                    self.cells[(key, row.key, col)] = v
        table = Table(key, title, caption if caption is not None else f"(in {self.unit} of US dollars)",
                      tuple(columns), tuple(r for r, _ in rows), when)
        self.tables[key] = table
        return table

    def identity(self, name: str, *terms: tuple[int, Key]) -> None:
        if all(k in self.cells for _, k in terms):
            self.identities.append(Identity(name, tuple(terms)))

    def sums(self, name: str, total: Key, parts: list[Key], signs: list[int] | None = None) -> None:
        signs = signs or [1] * len(parts)
        self.identity(name, (1, total), *((-s, k) for s, k in zip(signs, parts)))

    def equal(self, name: str, a: Key, b: Key, sign: int = 1) -> None:
        """a == sign * b"""
        self.identity(name, (1, a), (-sign, b))

    def quote(self, key: Key) -> str:
        """The figure at `key`, as the prose quotes it; the quote is a figure of its own, equal to it."""
        v = self.cells[key]
        mention = ("prose", f"m{self.mentions}", "")
        self.mentions += 1
        self.cells[mention] = v
        self.equal(f"the text quotes {key[1]} {key[2]}", mention, key)
        return money_words(v, self.unit)


def _pct(a: int, b: int) -> float:
    return (a - b) / abs(b) * 100 if b else 0.0


def generate(spec: Spec) -> Report:
    rng = random.Random(f"tempering-finance/{spec.seed}/{spec.size}")
    size = SIZES[spec.size]
    n = rng.randint(*size["years"])
    last = rng.randint(2016, 2025)
    years = tuple(range(last - n + 1, last + 1))
    unit = rng.choice(("thousands", "millions"))
    company = words.company_name(rng)
    segments = tuple(rng.sample(words.SEGMENTS, rng.randint(*size["segments"])))
    n_regions = rng.randint(*size["regions"])
    regions = words.REGIONS_SHORT if n_regions == 3 else tuple(rng.sample(words.REGIONS_LONG, n_regions))
    sim = _Sim(rng, n, len(segments), len(regions), unit, years[0])
    b = _Builder(unit)
    T = {y: t for t, y in enumerate(years, start=1)}  # year -> simulation index
    cols = [(str(y), str(y)) for y in reversed(years)]

    def per_year(series: list[int] | Callable[[int], int | None]) -> dict[str, int | None]:
        return {str(y): (series(T[y]) if callable(series) else series[T[y]]) for y in years}

    # --- the income statement
    R = Row
    is_rows = [
        (R("revenue", "Revenue", "sub"), per_year(sim.rev)),
        (R("cogs", "Cost of revenue"), per_year(lambda t: -sim.cogs[t])),
        (R("gp", "Gross profit", "sub"), per_year(sim.gp)),
        (R("rd", "Research and development"), per_year(lambda t: -sim.rd[t])),
        (R("sga", "Selling, general and administrative"), per_year(lambda t: -sim.sga[t])),
        (R("da", "Depreciation and amortization"), per_year(lambda t: -sim.da[t])),
        (R("oi", "Operating income (loss)", "sub"), per_year(sim.oi)),
        (R("interest", "Interest expense"), per_year(lambda t: -sim.interest[t])),
        (R("other", "Other income (expense), net"), per_year(sim.other)),
        (R("ibt", "Income (loss) before income taxes", "sub"), per_year(sim.ibt)),
        (R("tax", "Income tax expense"), per_year(lambda t: -sim.tax[t])),
        (R("ni", "Net income (loss)", "total"), per_year(sim.ni)),
        (R("shares", "Diluted weighted average shares (in thousands)", fmt="shares"), per_year(sim.shares)),
        (R("eps", "Diluted earnings (loss) per share (in US dollars)", fmt="eps"), per_year(sim.eps)),
    ]
    income = b.table("is", "Consolidated Statements of Operations", cols, is_rows)
    # --- the balance sheet
    bs_rows = [
        (R("h-assets", "Current assets:", "head"), {}),
        (R("cash", "Cash and cash equivalents"), per_year(sim.cash)),
        (R("ar", "Accounts receivable, net"), per_year(sim.ar)),
        (R("inv", "Inventories"), per_year(sim.inv)),
        (R("prepaid", "Prepaid expenses and other current assets"), per_year(sim.prepaid)),
        (R("tca", "Total current assets", "sub"),
         per_year(lambda t: sim.cash[t] + sim.ar[t] + sim.inv[t] + sim.prepaid[t])),
        (R("ppe", "Property, plant and equipment, net"), per_year(sim.ppe)),
        (R("gw", "Goodwill"), per_year(sim.gw)),
        (R("intang", "Intangible assets, net"), per_year(sim.intang)),
        (R("ta", "Total assets", "total"), per_year(sim._assets)),
        (R("h-liab", "Current liabilities:", "head"), {}),
        (R("ap", "Accounts payable"), per_year(sim.ap)),
        (R("accrued", "Accrued liabilities"), per_year(sim.accrued)),
        (R("curdebt", "Current portion of long-term debt"), per_year(sim.current)),
        (R("tcl", "Total current liabilities", "sub"), per_year(lambda t: sim.ap[t] + sim.accrued[t] + sim.current[t])),
        (R("ltd", "Long-term debt"), per_year(lambda t: sim.debt[t] - sim.current[t])),
        (R("oltl", "Other long-term liabilities"), per_year(sim.oltl)),
        (R("tl", "Total liabilities", "sub"),
         per_year(lambda t: sim.ap[t] + sim.accrued[t] + sim.debt[t] + sim.oltl[t])),
        (R("h-eq", "Shareholders' equity:", "head"), {}),
        (R("apic", "Common stock and additional paid-in capital"), per_year(sim.apic)),
        (R("re", "Retained earnings (accumulated deficit)"), per_year(sim.re)),
        (R("te", "Total shareholders' equity", "sub"), per_year(lambda t: sim.apic[t] + sim.re[t])),
        (R("tle", "Total liabilities and shareholders' equity", "total"),
         per_year(lambda t: sim.ap[t] + sim.accrued[t] + sim.debt[t] + sim.oltl[t] + sim.apic[t] + sim.re[t])),
    ]
    balance = b.table("bs", "Consolidated Balance Sheets", cols, bs_rows, when="end")
    # --- the cash flow
    d = lambda xs: (lambda t: -(xs[t] - xs[t - 1]))  # noqa: E731 - an increase of an asset uses cash
    up = lambda xs: (lambda t: xs[t] - xs[t - 1])  # noqa: E731
    cf_rows = [
        (R("h-op", "Operating activities:", "head"), {}),
        (R("ni", "Net income (loss)"), per_year(sim.ni)),
        (R("da", "Depreciation and amortization"), per_year(sim.da)),
        (R("sbc", "Stock-based compensation"), per_year(sim.sbc)),
        (R("d-ar", "(Increase) decrease in accounts receivable"), per_year(d(sim.ar))),
        (R("d-inv", "(Increase) decrease in inventories"), per_year(d(sim.inv))),
        (R("d-prepaid", "(Increase) decrease in prepaid expenses and other"), per_year(d(sim.prepaid))),
        (R("d-ap", "Increase (decrease) in accounts payable"), per_year(up(sim.ap))),
        (R("d-accrued", "Increase (decrease) in accrued liabilities"), per_year(up(sim.accrued))),
        (R("d-oltl", "Increase (decrease) in other long-term liabilities"), per_year(up(sim.oltl))),
        (R("cfo", "Net cash provided by (used in) operating activities", "sub"), per_year(sim.cfo)),
        (R("h-inv", "Investing activities:", "head"), {}),
        (R("capex", "Purchases of property, plant and equipment"), per_year(lambda t: -sim.capex[t])),
        (R("acq", "Acquisitions, net of cash acquired"), per_year(lambda t: -sim.acq[t])),
        (R("cfi", "Net cash used in investing activities", "sub"), per_year(sim.cfi)),
        (R("h-fin", "Financing activities:", "head"), {}),
        (R("borrow", "Proceeds from borrowings"), per_year(sim.borrow)),
        (R("repay", "Repayments of debt"), per_year(lambda t: -sim.repay[t])),
        (R("div", "Dividends paid"), per_year(lambda t: -sim.div[t])),
        (R("rep", "Repurchases of common stock"), per_year(lambda t: -sim.rep[t])),
        (R("cff", "Net cash provided by (used in) financing activities", "sub"), per_year(sim.cff)),
        (R("change", "Net increase (decrease) in cash and cash equivalents", "sub"),
         per_year(lambda t: sim.cash[t] - sim.cash[t - 1])),
        (R("begin", "Cash and cash equivalents at beginning of year"), per_year(lambda t: sim.cash[t - 1])),
        (R("end", "Cash and cash equivalents at end of year", "total"), per_year(sim.cash)),
    ]
    cashflow = b.table("cf", "Consolidated Statements of Cash Flows", cols, cf_rows)
    # --- notes' tables
    seg_rev = b.table("seg-rev", "Revenue by segment", cols,
                      [(R(f"s{i}", name), per_year(sim.seg[i])) for i, name in enumerate(segments)]
                      + [(R("total", "Total revenue", "total"), per_year(sim.rev))])
    seg_oi = b.table("seg-oi", "Operating income (loss) by segment", cols,
                     [(R(f"s{i}", name), per_year(sim.seg_oi[i])) for i, name in enumerate(segments)]
                     + [(R("corp", "Corporate and unallocated costs"), per_year(sim.corp)),
                        (R("total", "Total operating income (loss)", "total"), per_year(sim.oi))])
    geo = b.table("geo", "Revenue by geographic area", cols,
                  [(R(f"r{i}", name), per_year(sim.geo[i])) for i, name in enumerate(regions)]
                  + [(R("total", "Total revenue", "total"), per_year(sim.rev))])
    inv = b.table("inv", "Inventories", cols, [
        (R("raw", "Raw materials"), per_year(lambda t: sim.inv_parts[t][0])),
        (R("wip", "Work in process"), per_year(lambda t: sim.inv_parts[t][1])),
        (R("fg", "Finished goods"), per_year(lambda t: sim.inv[t] - sum(sim.inv_parts[t]))),
        (R("total", "Total inventories", "total"), per_year(sim.inv)),
    ], when="end")
    ppe_classes = ("Land", "Buildings and improvements", "Computer equipment and software", "Construction in progress")
    ppe = b.table("ppe", "Property, plant and equipment", cols, [
        *((R(f"c{i}", name), per_year(lambda t, i=i: sim.ppe_parts[t][i])) for i, name in enumerate(ppe_classes)),
        (R("mach", "Machinery and equipment"), per_year(lambda t: sim.gross[t] - sum(sim.ppe_parts[t]))),
        (R("gross", "Gross property, plant and equipment", "sub"), per_year(sim.gross)),
        (R("ad", "Less: accumulated depreciation"), per_year(lambda t: -sim.ad[t])),
        (R("net", "Net property, plant and equipment", "total"), per_year(sim.ppe)),
    ], when="end")
    da = b.table("da", "Depreciation and amortization", cols, [
        (R("dep", "Depreciation of property, plant and equipment"), per_year(sim.dep)),
        (R("amort", "Amortization of intangible assets"), per_year(sim.amort)),
        (R("total", "Total depreciation and amortization", "total"), per_year(sim.da)),
    ])
    gw_rows = [(R(f"s{i}", name), per_year(sim.gw_seg[i])) for i, name in enumerate(segments)]
    gw = b.table("gw", "Goodwill by segment", cols,
                 gw_rows + [(R("total", "Total goodwill", "total"), per_year(sim.gw))], when="end")
    shown = [tr for tr in sim.tranches if any(tr["bal"][t] for t in range(1, n + 1))]
    debt = b.table("debt", "Debt", cols, [
        *((R(f"d{i}", tr["label"]), per_year(tr["bal"])) for i, tr in enumerate(shown)),
        (R("total", "Total debt", "sub"), per_year(sim.debt)),
        (R("current", "Less: current portion"), per_year(lambda t: -sim.current[t])),
        (R("ltd", "Long-term debt, net of current portion", "total"), per_year(lambda t: sim.debt[t] - sim.current[t])),
    ], when="end")
    tax = b.table("tax", "Income tax expense", cols, [
        (R("federal", "Federal"), per_year(lambda t: sim.tax_parts[t][0])),
        (R("state", "State and local"), per_year(lambda t: sim.tax_parts[t][1])),
        (R("foreign", "Foreign"), per_year(lambda t: sim.tax_parts[t][2])),
        (R("total", "Total income tax expense", "total"), per_year(sim.tax)),
        (R("rate", "Effective tax rate", fmt="rate"),
         per_year(lambda t: round(sim.tax[t] / sim.ibt[t] * 1000) if sim.ibt[t] > 0 else None)),
    ])
    q_years = years if not size["quarters"] else years[-size["quarters"]:]
    quarterly = []
    for y in reversed(q_years):
        q = sim.quarters[T[y]]
        qcols = [("Q1", "Q1"), ("Q2", "Q2"), ("Q3", "Q3"), ("Q4", "Q4"), ("FY", "Full year")]
        quarterly.append(b.table(f"q{y}", f"Quarterly results for fiscal {y} (unaudited)", qcols, [
            (R("revenue", "Revenue"), dict(zip([c for c, _ in qcols], q["revenue"] + [sim.rev[T[y]]]))),
            (R("gp", "Gross profit"), dict(zip([c for c, _ in qcols], q["gp"] + [sim.gp[T[y]]]))),
            (R("ni", "Net income (loss)"), dict(zip([c for c, _ in qcols], q["ni"] + [sim.ni[T[y]]]))),
        ], when="quarter"))

    _identities(b, years, segments, regions, shown, q_years, len(ppe_classes))
    body = _body(b, rng, size, company, unit, years, segments, regions, sim, T,
                 dict(income=income, balance=balance, cashflow=cashflow, seg_rev=seg_rev, seg_oi=seg_oi, geo=geo,
                      inv=inv, ppe=ppe, da=da, gw=gw, debt=debt, tax=tax), quarterly, shown)
    # only what the report prints: the figures of tables it leaves out, and their identities, go
    shown_tables = {block.key for block in body if isinstance(block, Table)}
    tables = {k: v for k, v in b.tables.items() if k in shown_tables}
    cells = {k: v for k, v in b.cells.items() if k[0] in shown_tables or k[0] == "prose"}
    identities = tuple(i for i in b.identities if all(k in cells for _, k in i.terms))
    report = Report(spec, company, unit, years, segments, regions, tuple(body), tables, cells, identities)
    if spec.tamper:
        _tamper(report)
    return report


def _identities(b: _Builder, years, segments, regions, tranches, q_years, n_classes: int) -> None:
    for y in years:
        c, p = str(y), str(y - 1)

        def k(table: str, row: str, col: str = c) -> Key:
            return (table, row, col)

        # the income statement (costs are shown negative: each subtotal is the sum of the lines above it)
        b.sums(f"gross profit {c}", k("is", "gp"), [k("is", "revenue"), k("is", "cogs")])
        b.sums(f"operating income {c}", k("is", "oi"), [k("is", "gp"), k("is", "rd"), k("is", "sga"), k("is", "da")])
        b.sums(f"income before taxes {c}", k("is", "ibt"), [k("is", "oi"), k("is", "interest"), k("is", "other")])
        b.sums(f"net income {c}", k("is", "ni"), [k("is", "ibt"), k("is", "tax")])
        # the balance sheet
        b.sums(f"current assets {c}", k("bs", "tca"), [k("bs", r) for r in ("cash", "ar", "inv", "prepaid")])
        b.sums(f"total assets {c}", k("bs", "ta"), [k("bs", r) for r in ("tca", "ppe", "gw", "intang")])
        b.sums(f"current liabilities {c}", k("bs", "tcl"), [k("bs", r) for r in ("ap", "accrued", "curdebt")])
        b.sums(f"total liabilities {c}", k("bs", "tl"), [k("bs", r) for r in ("tcl", "ltd", "oltl")])
        b.sums(f"equity {c}", k("bs", "te"), [k("bs", "apic"), k("bs", "re")])
        b.sums(f"liabilities and equity {c}", k("bs", "tle"), [k("bs", "tl"), k("bs", "te")])
        b.equal(f"assets = liabilities + equity {c}", k("bs", "ta"), k("bs", "tle"))
        # the cash flow
        b.sums(f"operating cash flow {c}", k("cf", "cfo"),
               [k("cf", r) for r in ("ni", "da", "sbc", "d-ar", "d-inv", "d-prepaid", "d-ap", "d-accrued", "d-oltl")])
        b.sums(f"investing cash flow {c}", k("cf", "cfi"), [k("cf", "capex"), k("cf", "acq")])
        b.sums(f"financing cash flow {c}", k("cf", "cff"), [k("cf", r) for r in ("borrow", "repay", "div", "rep")])
        b.sums(f"net change in cash {c}", k("cf", "change"), [k("cf", "cfo"), k("cf", "cfi"), k("cf", "cff")])
        b.sums(f"ending cash {c}", k("cf", "end"), [k("cf", "begin"), k("cf", "change")])
        b.equal(f"cash flow's ending cash = balance sheet cash {c}", k("cf", "end"), k("bs", "cash"))
        b.equal(f"cash flow's beginning cash = last year's balance sheet cash {c}", k("cf", "begin"),
                k("bs", "cash", p))
        b.equal(f"net income in the cash flow {c}", k("cf", "ni"), k("is", "ni"))
        b.equal(f"D&A in the cash flow {c}", k("cf", "da"), k("is", "da"), -1)
        for row, bs_row, sign in (("d-ar", "ar", -1), ("d-inv", "inv", -1), ("d-prepaid", "prepaid", -1),
                                  ("d-ap", "ap", 1), ("d-accrued", "accrued", 1), ("d-oltl", "oltl", 1)):
            b.identity(f"change in {bs_row} {c}", (1, k("cf", row)), (-sign, k("bs", bs_row)),
                       (sign, k("bs", bs_row, p)))
        # roll-forwards: net income and dividends into retained earnings, stock compensation and
        # buy-backs into paid-in capital, capital spending into gross PP&E, depreciation into
        # accumulated depreciation, borrowings and repayments into debt
        b.identity(f"retained earnings roll-forward {c}", (1, k("bs", "re")), (-1, k("bs", "re", p)),
                   (-1, k("is", "ni")), (-1, k("cf", "div")))
        b.identity(f"paid-in capital roll-forward {c}", (1, k("bs", "apic")), (-1, k("bs", "apic", p)),
                   (-1, k("cf", "sbc")), (-1, k("cf", "rep")))
        b.identity(f"gross PP&E roll-forward {c}", (1, k("ppe", "gross")), (-1, k("ppe", "gross", p)),
                   (1, k("cf", "capex")))
        b.identity(f"accumulated depreciation roll-forward {c}", (1, k("ppe", "ad")), (-1, k("ppe", "ad", p)),
                   (1, k("da", "dep")))
        b.identity(f"debt roll-forward {c}", (1, k("debt", "total")), (-1, k("debt", "total", p)),
                   (-1, k("cf", "borrow")), (-1, k("cf", "repay")))
        # segments, regions and notes against the statements
        b.sums(f"segment revenue {c}", k("seg-rev", "total"), [k("seg-rev", f"s{i}") for i in range(len(segments))])
        b.equal(f"segment revenue = revenue {c}", k("seg-rev", "total"), k("is", "revenue"))
        b.sums(f"segment operating income {c}", k("seg-oi", "total"),
               [k("seg-oi", f"s{i}") for i in range(len(segments))] + [k("seg-oi", "corp")])
        b.equal(f"segment operating income = operating income {c}", k("seg-oi", "total"), k("is", "oi"))
        b.sums(f"regional revenue {c}", k("geo", "total"), [k("geo", f"r{i}") for i in range(len(regions))])
        b.equal(f"regional revenue = revenue {c}", k("geo", "total"), k("is", "revenue"))
        b.sums(f"inventories {c}", k("inv", "total"), [k("inv", r) for r in ("raw", "wip", "fg")])
        b.equal(f"inventories note = balance sheet {c}", k("inv", "total"), k("bs", "inv"))
        b.sums(f"gross PP&E {c}", k("ppe", "gross"), [k("ppe", f"c{i}") for i in range(n_classes)] + [k("ppe", "mach")])
        b.sums(f"net PP&E {c}", k("ppe", "net"), [k("ppe", "gross"), k("ppe", "ad")])
        b.equal(f"PP&E note = balance sheet {c}", k("ppe", "net"), k("bs", "ppe"))
        b.sums(f"depreciation and amortization {c}", k("da", "total"), [k("da", "dep"), k("da", "amort")])
        b.equal(f"D&A note = income statement {c}", k("da", "total"), k("is", "da"), -1)
        b.sums(f"goodwill {c}", k("gw", "total"), [k("gw", f"s{i}") for i in range(len(segments))])
        b.equal(f"goodwill note = balance sheet {c}", k("gw", "total"), k("bs", "gw"))
        b.sums(f"debt {c}", k("debt", "total"), [k("debt", f"d{i}") for i in range(len(tranches))])
        b.sums(f"long-term debt {c}", k("debt", "ltd"), [k("debt", "total"), k("debt", "current")])
        b.equal(f"current debt note = balance sheet {c}", k("debt", "current"), k("bs", "curdebt"), -1)
        b.equal(f"long-term debt note = balance sheet {c}", k("debt", "ltd"), k("bs", "ltd"))
        b.sums(f"income taxes {c}", k("tax", "total"), [k("tax", r) for r in ("federal", "state", "foreign")])
        b.equal(f"tax note = income statement {c}", k("tax", "total"), k("is", "tax"), -1)
    for y in q_years:
        for row in ("revenue", "gp", "ni"):
            q = f"q{y}"
            b.sums(f"quarterly {row} {y}", (q, row, "FY"), [(q, row, f"Q{i}") for i in range(1, 5)])
            b.equal(f"quarterly {row} = income statement {y}", (q, row, "FY"), ("is", row, str(y)))


def _body(b: _Builder, rng: random.Random, size: dict, company: str, unit: str, years, segments, regions, sim, T,
          t: dict[str, Table], quarterly: list[Table], tranches: list[dict]) -> list[Block]:
    last, first = years[-1], years[0]
    ls = str(last)
    listing = ", ".join(segments[:-1]) + f" and {segments[-1]}" if len(segments) > 1 else segments[0]
    notes = size["notes"]
    body: list[Block] = [
        Heading(company, 0), Para(f"Annual Report for fiscal {last}"),
        Para(f"{company} designs, makes and sells products and services through {len(segments)} reportable "
             f"segments: {listing}. This report covers fiscal years {first} to {last}. All amounts are in "
             f"{unit} of US dollars unless stated otherwise; per-share amounts are in US dollars."),
    ]
    if notes:
        body += [Heading("Contents", 2), Contents(), PageBreak()]
    rev = lambda y: ("is", "revenue", str(y))  # noqa: E731
    ni = ("is", "ni", ls)
    g = _pct(b.cells[rev(last)], b.cells[rev(last - 1)])
    letter = (f"Dear shareholders, in fiscal {last} revenue was {b.quote(rev(last))}, "
              f"{'up' if g >= 0 else 'down'} {abs(g):.1f}% from fiscal {last - 1}. ")
    letter += (f"Net income was {b.quote(ni)}. " if b.cells[ni] >= 0 else f"The net loss was {b.quote(ni)}. ")
    cfo = ("cf", "cfo", ls)
    letter += (f"Operating activities provided {b.quote(cfo)} of cash. " if b.cells[cfo] >= 0
               else f"Operating activities used {b.quote(cfo)} of cash. ")
    letter += "We thank our partners and shareholders for their continued support."
    body += [Heading("Letter to shareholders", 1), Para(letter)]
    # risk factors: long reports get enough of them to reach the target length (added below)
    if notes:
        body.append(Heading("Risk factors", 1))
    n_risks = rng.randint(*size["risks"])

    def risk(number: int) -> list[Block]:
        parts = words.risk_section(rng, number, rng.randint(*size["risk_paragraphs"]))
        return [Heading(text, 2) if kind == "heading" else Para(text) for kind, text in parts]

    for i in range(n_risks):
        body += risk(i + 1)
    risks_end = len(body)
    # management's discussion: one subsection per pair of years, newest first
    if notes:
        body.append(Heading("Management's discussion and analysis", 1))
    pairs = [(y, y - 1) for y in reversed(years[1:])]
    if not size["mdna_segments"]:
        pairs = pairs[:1]
    for y, p in pairs:
        body.append(Heading(f"Fiscal {y} compared with fiscal {p}", 2))
        ry, rp = b.cells[rev(y)], b.cells[rev(p)]
        gm_y = b.cells[("is", "gp", str(y))] / ry * 100
        gm_p = b.cells[("is", "gp", str(p))] / rp * 100
        text = (f"Revenue was {b.quote(rev(y))} in fiscal {y} compared with {b.quote(rev(p))} in fiscal {p}, "
                f"{'an increase' if ry >= rp else 'a decrease'} of {abs(_pct(ry, rp)):.1f}%. Gross margin was "
                f"{gm_y:.1f}% compared with {gm_p:.1f}%. ")
        oi = ("is", "oi", str(y))
        text += (f"Operating income was {b.quote(oi)}." if b.cells[oi] >= 0
                 else f"The operating loss was {b.quote(oi)}.")
        body.append(Para(text))
        if size["mdna_segments"]:
            for i, name in enumerate(segments):
                k_y, k_p = ("seg-rev", f"s{i}", str(y)), ("seg-rev", f"s{i}", str(p))
                change = _pct(b.cells[k_y], b.cells[k_p])
                body.append(Para(f"{name}: revenue of the segment was {b.quote(k_y)} in fiscal {y}, "
                                 f"{'up' if change >= 0 else 'down'} {abs(change):.1f}% from {b.quote(k_p)}. "
                                 f"{words.risk_paragraph(rng, 'demand in the segment').split('. ', 1)[1]}"))
    if not notes:
        return body + [Heading("Consolidated financial statements", 1), t["income"], t["balance"], t["cashflow"],
                       t["seg_rev"]]
    body.append(Heading("Liquidity and capital resources", 2))
    body.append(Para(f"At the end of fiscal {last}, cash and cash equivalents were {b.quote(('bs', 'cash', ls))} "
                     f"and total debt was {b.quote(('debt', 'total', ls))}. We believe that cash from operations "
                     "and our credit facilities will be sufficient to meet our needs for the next twelve months."))
    body += [PageBreak(), Heading("Consolidated financial statements", 1), t["income"], t["balance"], t["cashflow"]]
    body.append(Heading("Notes to the consolidated financial statements", 1))
    body += [Heading("Note 1. Basis of presentation", 2), Para(words.BASIS)]
    if size["policies"]:
        body += [Para(p) for p in words.POLICIES]
    body += [Heading("Note 2. Segment information", 2),
             Para(f"The company reports {len(segments)} segments. Segment operating income excludes corporate "
                  "and unallocated costs."), t["seg_rev"], t["seg_oi"],
             Heading("Note 3. Revenue by geographic area", 2),
             Para("Revenue is attributed to geographic areas based on the location of the customer's order."), t["geo"],
             Heading("Note 4. Inventories", 2), t["inv"],
             Heading("Note 5. Property, plant and equipment", 2), t["ppe"], t["da"],
             Heading("Note 6. Goodwill", 2), t["gw"],
             Heading("Note 7. Debt", 2),
             Para("The company's debt consists of the instruments below; amounts due within twelve months are "
                  "presented as the current portion."), t["debt"],
             Heading("Note 8. Income taxes", 2), t["tax"],
             Heading("Note 9. Quarterly results (unaudited)", 2), *quarterly]
    target = size["target_chars"]
    if target:
        have = _approx_chars(body, b.tables)
        extra: list[Block] = []
        while have < target:
            section = risk(n_risks + 1)
            n_risks += 1
            extra += section
            have += _approx_chars(section, b.tables)
        body[risks_end:risks_end] = extra
    return body


def _approx_chars(body: list[Block], tables: dict[str, Table]) -> int:
    """About the length of the markdown (a lower bound: each cell counted as 10 characters)."""
    n = 0
    for block in body:
        if isinstance(block, Para):
            n += len(block.text) + 2
        elif isinstance(block, Heading):
            n += len(block.text) + 4
        elif isinstance(block, Table):
            n += sum(len(r.label) + 4 + 10 * len(block.columns) for r in block.rows)
    return n


# ---------------------------------------------------------------------------------------------
# The altered figure


def label_key(label: str) -> str:
    """A label as answers are compared: lower case, words only, without filler words and years."""
    text = label.lower().replace("&", " and ")
    tokens = re.findall(r"[a-z0-9]+", text)
    return " ".join(t for t in tokens if t not in _FILLER and not re.fullmatch(r"(19|20)\d\d", t))


_FILLER = {"the", "a", "an", "line", "item", "statement", "statements", "consolidated", "fiscal", "fy", "year", "in",
           "of", "on", "for", "table", "note", "row", "figure", "amount"}


def tamper_candidates(report: Report) -> list[Key]:
    """The figures that may be altered: a money figure in a table, at least 20 units, in two
    identities or more whose pattern (which identities, with which signs) no other figure shares,
    and whose label no other row of any table has (so naming the line item says which it is)."""
    where: dict[Key, list[tuple[int, int]]] = {}
    for i, ident in enumerate(report.identities):
        for coef, key in ident.terms:
            where.setdefault(key, []).append((i, coef))

    def signature(key: Key) -> tuple:
        terms = sorted(where.get(key, []))
        s = 1 if not terms or terms[0][1] > 0 else -1
        return tuple((i, s * c) for i, c in terms)

    counts: dict[tuple, int] = {}
    for key in where:
        counts[signature(key)] = counts.get(signature(key), 0) + 1
    labels: dict[str, int] = {}
    for table in report.tables.values():
        for row in table.rows:
            labels[label_key(row.label)] = labels.get(label_key(row.label), 0) + 1
    out = []
    for key in sorted(where):
        if key[0] == "prose" or report.row(key).fmt != "money" or abs(report.cells[key]) < 20:
            continue
        sig = signature(key)
        if len(sig) >= 2 and counts[sig] == 1 and labels[label_key(report.label(key))] == 1:
            out.append(key)
    return out


def _tamper(report: Report) -> None:
    rng = random.Random(f"tempering-finance-tamper/{report.spec.seed}/{report.spec.size}/{report.spec.tamper}")
    candidates = tamper_candidates(report)
    key = candidates[rng.randrange(len(candidates))]
    v = report.cells[key]
    delta = max(1, round(abs(v) * rng.uniform(0.05, 0.25)))
    sign = rng.choice((-1, 1))
    if v > 0 and v - delta <= 0:
        sign = 1
    if v < 0 and v + delta >= 0:
        sign = -1
    report.original = v
    report.tampered = key
    report.cells[key] = v + sign * delta


# ---------------------------------------------------------------------------------------------
# Per-process caches: whichever process needs a report (the rollout worker's tools, the
# verifier, SFT) rebuilds it from its Spec.


def memo(maxsize: int) -> Callable:
    """An LRU cache whose computation runs under a lock: concurrent callers of one key wait for
    the first instead of rendering the same report twice."""

    def wrap(fn: Callable) -> Callable:
        cache: OrderedDict = OrderedDict()
        lock = threading.RLock()

        def cached(*args):
            with lock:
                if args in cache:
                    cache.move_to_end(args)
                    return cache[args]
                value = fn(*args)
                cache[args] = value
                while len(cache) > maxsize:
                    cache.popitem(last=False)
                return value

        cached.cache = cache  # type: ignore[attr-defined]
        cached.__wrapped__ = fn  # type: ignore[attr-defined]
        cached.__doc__ = fn.__doc__
        return cached

    return wrap


@memo(32)
def report(spec: Spec) -> Report:
    """The report of `spec` (generated once per process; treat it as read-only)."""
    return generate(spec)


__all__ = ["Block", "Contents", "Heading", "Identity", "Key", "PageBreak", "Para", "Report", "Row", "SIZES", "Spec",
           "Table", "UNITS", "fmt_signed", "fmt_value", "generate", "label_key", "memo", "report", "tamper_candidates"]

