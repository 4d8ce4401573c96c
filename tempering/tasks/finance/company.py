"""The simulated company: its years 0..n (0 is the hidden opening year) as plain lists.

`Company` draws a company from a seeded RNG and runs it year by year: segments on their own
revenue trends, costs as shares of revenue, working capital as days of sales or costs, capital
spending, depreciation and acquisitions, debt tranches (a term loan, senior notes, a revolving
facility drawn when cash runs low), taxes, dividends and buy-backs; then shares and earnings per
share, segment operating income, regions, the compositions the notes break out (inventories,
PP&E classes; taxes by jurisdiction come with each year) and quarters. Every series is an integer in the report's unit,
and the balance sheet balances by construction (cash is what the cash flow leaves).

It knows nothing of tables, keys or prose: `tables` turns its series into the report's tables.
The RNG is drawn in a fixed order (each phase below in turn), so a seed gives the same company.
"""

from __future__ import annotations

import math
import random

from tempering.tasks.finance.report import UNITS


class Company:
    """One company's years 0..n (0 is the hidden opening year) as plain lists."""

    def __init__(self, rng: random.Random, n: int, n_segments: int, n_regions: int, unit: str, first_year: int):
        self.rng, self.n = rng, n
        self.year0 = first_year - 1  # the calendar year of index 0
        self._revenue(n_segments, unit == "thousands")
        self._costs()
        self._working_capital()
        self._long_lived_assets(n_segments)
        self.dep, self.amort, self.capex, self.acq, self.da = [0], [0], [0], [0], [0]
        self._opening_debt()
        self._opening_equity()
        self.interest, self.oi, self.ibt, self.tax, self.ni = [0], [0], [0], [0], [0]
        self.borrow, self.repay, self.div, self.rep, self.cfo, self.cfi, self.cff = [0], [0], [0], [0], [0], [0], [0]
        self._policies()
        for t in range(1, n + 1):
            self._invest(t)
            self._earn(t)
            self._cash(t)
        self._current_portion()
        self._shares(unit)
        self._segment_income(n_segments)
        self._geography(n_regions)
        self._compositions()
        self._quarters()

    # --- the opening year and the company's parameters

    def _revenue(self, n_segments: int, big: bool) -> None:
        """Revenue by segment, each on its own trend, and in total."""
        rng, u, n = self.rng, self.rng.uniform, self.n
        rev0 = rng.randint(150_000, 4_000_000) if big else rng.randint(1_500, 60_000)
        weights = [u(0.5, 2.0) for _ in range(n_segments)]
        trend = [u(-0.03, 0.12) for _ in range(n_segments)]
        self.seg = [[max(1, round(rev0 * w / sum(weights)))] for w in weights]
        for t in range(1, n + 1):
            for s in range(n_segments):
                g = min(0.5, max(-0.3, trend[s] + rng.gauss(0, 0.06)))
                self.seg[s].append(max(1, round(self.seg[s][-1] * (1 + g))))
        self.rev = [sum(self.seg[s][t] for s in range(n_segments)) for t in range(n + 1)]

    def _costs(self) -> None:
        """Costs as shares of revenue: cost of revenue, R&D, SG&A, stock compensation, other income."""
        rng, u, rev, R = self.rng, self.rng.uniform, self.rev, range(self.n + 1)
        c, r, s_ = u(0.45, 0.65), u(0.02, 0.10), u(0.10, 0.20)
        self.cogs = [round(rev[t] * (c + rng.gauss(0, 0.015))) for t in R]
        self.gp = [rev[t] - self.cogs[t] for t in R]
        self.rd = [round(rev[t] * (r + rng.gauss(0, 0.004))) for t in R]
        self.sga = [round(rev[t] * (s_ + rng.gauss(0, 0.006))) for t in R]
        self.sbc = [round(rev[t] * u(0.005, 0.02)) for t in R]
        self.other = [round(rev[t] * rng.gauss(0, 0.002)) for t in R]

    def _working_capital(self) -> None:
        """Receivables, inventories and payables as days of sales or costs; accruals; other liabilities."""
        rng, u, rev, R = self.rng, self.rng.uniform, self.rev, range(self.n + 1)
        dso, dio, dpo = u(35, 75), u(40, 110), u(30, 70)
        pre, acc = u(0.01, 0.03), u(0.03, 0.07)
        self.ar = [round(rev[t] * (dso + rng.gauss(0, 3)) / 365) for t in R]
        self.inv = [round(self.cogs[t] * (dio + rng.gauss(0, 5)) / 365) for t in R]
        self.prepaid = [round(rev[t] * (pre + rng.gauss(0, 0.002))) for t in R]
        self.ap = [round(self.cogs[t] * (dpo + rng.gauss(0, 3)) / 365) for t in R]
        self.accrued = [round(rev[t] * (acc + rng.gauss(0, 0.003))) for t in R]
        self.oltl = [round(rev[0] * u(0.02, 0.08))]
        for t in range(1, self.n + 1):
            self.oltl.append(max(0, self.oltl[-1] + round(rev[t] * rng.gauss(0.002, 0.004))))

    def _long_lived_assets(self, n_segments: int) -> None:
        """The opening PP&E, intangibles and goodwill (owned by about half the segments), and the
        rates of depreciation, amortization and capital spending."""
        rng, u, rev = self.rng, self.rng.uniform, self.rev
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
        self._dep_rate, self._amort_rate, self._capex_rate = u(0.08, 0.14), u(0.10, 0.18), u(0.03, 0.08)

    def _opening_debt(self) -> None:
        """A term loan repaid in equal instalments, one or two senior notes, and an undrawn revolver."""
        rng, u, rev, year0 = self.rng, self.rng.uniform, self.rev, self.year0
        self.tranches: list[dict] = []
        term = round(rev[0] * u(0.05, 0.25))
        self._instalment = max(1, math.ceil(term / rng.randint(5, 8)))
        self.tranches.append(dict(label=f"Term loan due {year0 + math.ceil(term / self._instalment)}",
                                  rate=u(0.035, 0.065), bal=[term], kind="term", due=None))
        self._labels: set[str] = set()
        for _ in range(rng.randint(1, 2)):
            self._note(year0, round(rev[0] * u(0.05, 0.2)), year0 + rng.randint(1, 12), opening=True)
        self.tranches.append(dict(label="Revolving credit facility", rate=u(0.05, 0.07), bal=[0], kind="revolver",
                                  due=None))
        self.debt = [sum(tr["bal"][0] for tr in self.tranches)]

    def _opening_equity(self) -> None:
        """Opening cash (raised if need be so that equity is a quarter of assets at least), and the
        equity that balances the opening balance sheet, split into paid-in capital and retained earnings."""
        u = self.rng.uniform
        self.cash = [round(self.rev[0] * u(0.06, 0.2))]
        ta = self.assets(0)
        tl = self.ap[0] + self.accrued[0] + self.debt[0] + self.oltl[0]
        if ta - tl < 0.25 * ta:
            self.cash[0] += round(0.25 * ta - (ta - tl)) + 1
            ta = self.assets(0)
        equity = ta - tl
        self.apic = [round(equity * u(0.2, 0.6))]
        self.re = [equity - self.apic[0]]

    def _policies(self) -> None:
        """The dividend payout ratio (none, at times), whether it buys back shares, its tax rate."""
        rng, u = self.rng, self.rng.uniform
        self._payout = 0.0 if rng.random() < 0.3 else u(0.1, 0.4)
        self._buyback = rng.random() < 0.5
        self._tax_rate = u(0.18, 0.27)
        self.tax_parts = [(0, 0, 0)]

    # --- one year

    def _invest(self, t: int) -> None:
        """Year t's depreciation and amortization, capital spending and acquisitions (goodwill to one
        segment), and the long-lived assets they leave."""
        rng, u, rev, n_segments = self.rng, self.rng.uniform, self.rev, len(self.seg)
        self.dep.append(round(self.ppe[t - 1] * (self._dep_rate + rng.gauss(0, 0.005))))
        self.amort.append(min(self.intang[t - 1], round(self.intang[t - 1] * self._amort_rate)))
        self.da.append(self.dep[t] + self.amort[t])
        self.capex.append(round(rev[t] * (self._capex_rate + rng.gauss(0, 0.005))))
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

    def _earn(self, t: int) -> None:
        """Year t's income statement below gross profit: interest on last year's debt, operating
        income, taxes (by jurisdiction) and net income."""
        rng, u, rev = self.rng, self.rng.uniform, self.rev
        self.interest.append(round(sum(tr["bal"][t - 1] * tr["rate"] for tr in self.tranches)))
        self.oi.append(self.gp[t] - self.rd[t] - self.sga[t] - self.da[t])
        self.ibt.append(self.oi[t] - self.interest[t] + self.other[t])
        tax = round(self.ibt[t] * (self._tax_rate + rng.gauss(0, 0.01))) if self.ibt[t] > 0 else round(rev[t] * 0.002)
        self.tax.append(tax)
        foreign, state = round(tax * u(0.1, 0.4)), round(tax * u(0.05, 0.15))
        self.tax_parts.append((tax - foreign - state, state, foreign))
        self.ni.append(self.ibt[t] - tax)

    def _cash(self, t: int) -> None:
        """Year t's cash flows: operating and investing; debt falling due, new notes, dividends and
        buy-backs; the revolver keeping cash in range; and the balances they leave."""
        rng, u, rev, year = self.rng, self.rng.uniform, self.rev, self.year0 + t
        self.cfo.append(self.ni[t] + self.da[t] + self.sbc[t] - (self.ar[t] - self.ar[t - 1])
                        - (self.inv[t] - self.inv[t - 1]) - (self.prepaid[t] - self.prepaid[t - 1])
                        + (self.ap[t] - self.ap[t - 1]) + (self.accrued[t] - self.accrued[t - 1])
                        + (self.oltl[t] - self.oltl[t - 1]))
        self.cfi.append(-self.capex[t] - self.acq[t])
        issued = repaid = 0
        for tr in self.tranches:
            bal = tr["bal"][t - 1]
            if tr["kind"] == "term":
                pay = min(self._instalment, bal)
            elif tr["kind"] == "note" and tr["due"] == year:
                pay = bal
            else:
                pay = 0
            tr["bal"].append(bal - pay)
            repaid += pay
        if rng.random() < 0.2:
            issued = self._note(year, round(rev[t] * u(0.05, 0.15)), year + rng.randint(5, 10))
        self.div.append(round(max(self.ni[t], 0) * self._payout))
        self.rep.append(min(round(rev[t] * u(0.0, 0.03)) if self._buyback else 0,
                            max(0, self.apic[-1] + self.sbc[t] - self.apic[0] // 3)))
        cash = self.cash[-1] + self.cfo[t] + self.cfi[t] + issued - repaid - self.div[t] - self.rep[t]
        drawn, paid = self._revolver(t, cash)
        issued, repaid, cash = issued + drawn, repaid + paid, cash + drawn - paid
        self.borrow.append(issued)
        self.repay.append(repaid)
        self.cff.append(issued - repaid - self.div[t] - self.rep[t])
        self.cash.append(cash)
        self.debt.append(sum(tr["bal"][t] for tr in self.tranches))
        self.apic.append(self.apic[-1] + self.sbc[t] - self.rep[t])
        self.re.append(self.re[-1] + self.ni[t] - self.div[t])

    def _revolver(self, t: int, cash: int) -> tuple[int, int]:
        """(drawn, repaid) on the revolver in year t: drawn when cash would fall below 4% of revenue,
        repaid down to 15% when it would exceed 25%."""
        rev = self.rev
        revolver = self.tranches[[tr["kind"] for tr in self.tranches].index("revolver")]
        low, high = round(rev[t] * 0.04), round(rev[t] * 0.25)
        if cash < low:
            draw = low - cash + round(rev[t] * self.rng.uniform(0.01, 0.04))
            revolver["bal"][t] += draw
            return draw, 0
        if cash > high and revolver["bal"][t] > 0:
            pay = min(revolver["bal"][t], cash - round(rev[t] * 0.15))
            revolver["bal"][t] -= pay
            return 0, pay
        return 0, 0

    def _note(self, year: int, amount: int, due: int, opening: bool = False) -> int:
        """Issue senior notes of `amount` in `year` (at the opening, or in the year being simulated)."""
        while True:
            rate = round(self.rng.uniform(2.5, 6.5) * 8) / 8
            label = f"{rate:.3f}".rstrip("0").rstrip(".") + f"% senior notes due {due}"
            if label not in self._labels:
                break
            due += 1
        self._labels.add(label)
        issued_at = 0 if opening else len(self.cash)  # the simulation index of `year`
        tr = dict(label=label, rate=rate / 100, bal=[0] * issued_at + [amount], kind="note", due=due)
        # before the revolver, which is always last
        self.tranches.insert(len(self.tranches) if opening else len(self.tranches) - 1, tr)
        return amount

    # --- after the years: what the notes and the per-share figures break out

    def _current_portion(self) -> None:
        """The current portion of debt: what falls due in the next year."""
        self.current = []
        for t in range(self.n + 1):
            due = 0
            for tr in self.tranches:
                if tr["kind"] == "term":
                    due += min(self._instalment, tr["bal"][t])
                elif tr["kind"] == "note" and tr["due"] == self.year0 + t + 1:
                    due += tr["bal"][t]
            self.current.append(due)

    def _shares(self, unit: str) -> None:
        """Diluted shares (in thousands: revenue of $20-200 a share) and earnings per share (cents)."""
        rng, R = self.rng, range(self.n + 1)
        shares = round(self.rev[0] * UNITS[unit] / rng.uniform(20, 200) / 1000)
        self.shares = []
        for t in R:
            shares = round(shares * (1 + rng.gauss(-0.005, 0.01)))
            self.shares.append(shares)
        scale = UNITS[unit]
        self.eps = [round(self.ni[t] * scale * 100 / (self.shares[t] * 1000)) for t in R]

    def _segment_income(self, n_segments: int) -> None:
        """Segment operating income: the consolidated figure less corporate costs, shared by margin."""
        rng, u, n = self.rng, self.rng.uniform, self.n
        margin = [u(0.05, 0.3) for _ in range(n_segments)]
        self.corp = [-round(self.rev[t] * u(0.01, 0.03)) for t in range(n + 1)]
        self.seg_oi = [[0] * (n + 1) for _ in range(n_segments)]
        for t in range(1, n + 1):
            pool = self.oi[t] - self.corp[t]
            w = [self.seg[s][t] * (margin[s] + rng.gauss(0, 0.02)) for s in range(n_segments)]
            self._split(pool, w, self.seg_oi, t)

    def _geography(self, n_regions: int) -> None:
        """Revenue by region, each region's weight drifting from year to year."""
        rng, n = self.rng, self.n
        rw = [rng.uniform(0.5, 3.0) for _ in range(n_regions)]
        self.geo = [[0] * (n + 1) for _ in range(n_regions)]
        for t in range(1, n + 1):
            rw = [max(0.2, x * (1 + rng.gauss(0, 0.05))) for x in rw]
            self._split(self.rev[t], rw, self.geo, t)

    def _compositions(self) -> None:
        """Inventories (raw materials, work in process; finished goods the rest) and gross PP&E by
        class (land, buildings, IT, construction in progress; machinery and equipment the rest)."""
        rng, u, R = self.rng, self.rng.uniform, range(self.n + 1)
        raw, wip = u(0.2, 0.35), u(0.1, 0.25)
        self.inv_parts = [(round(self.inv[t] * raw), round(self.inv[t] * wip)) for t in R]
        classes = [u(0.04, 0.1), u(0.25, 0.35), u(0.05, 0.12), u(0.03, 0.08)]  # land, buildings, IT, CIP
        self.ppe_parts = []
        for t in R:
            parts = [round(self.gross[t] * max(0.01, c + rng.gauss(0, 0.005))) for c in classes]
            self.ppe_parts.append(parts)  # machinery and equipment is the rest

    def _quarters(self) -> None:
        """Each year's revenue, gross profit and net income split into quarters by a seasonal pattern."""
        rng, u = self.rng, self.rng.uniform
        season = [u(0.2, 0.3) for _ in range(4)]
        self.quarters: dict[int, dict[str, list[int]]] = {}
        for t in range(1, self.n + 1):
            w = [x * (1 + rng.gauss(0, 0.05)) for x in season]
            q = {"revenue": self._parts(self.rev[t], w), "gp": self._parts(self.gp[t], w),
                 "ni": self._parts(self.ni[t], [x * (1 + rng.gauss(0, 0.2)) for x in w])}
            self.quarters[t] = q

    # --- helpers

    def assets(self, t: int) -> int:
        """Total assets at the end of year t."""
        return (self.cash[t] + self.ar[t] + self.inv[t] + self.prepaid[t] + self.ppe[t] + self.gw[t]
                + self.intang[t])

    @staticmethod
    def _parts(total: int, weights: list[float]) -> list[int]:
        out = [round(total * w / sum(weights)) for w in weights[:-1]]
        return out + [total - sum(out)]

    def _split(self, total: int, weights: list[float], into: list[list[int]], t: int) -> None:
        for s, v in enumerate(self._parts(total, weights)):
            into[s][t] = v


__all__ = ["Company"]
