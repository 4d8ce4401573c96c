"""The report's tables, written from the simulated company into the ledger.

`write(ledger, company, years, segments, regions, q_years)` writes, in this order, the three
statements (operations, balance sheet, cash flows), the segment and geographic tables, the notes'
tables (inventories, PP&E, depreciation and amortization, goodwill, debt, income taxes) and a
quarterly table for each year of `q_years`. Costs, cash outflows and contra-accounts are shown
negative, so that every subtotal is the sum of the lines above it. Each table's figures go into
the ledger's cells under (table key, row key, year); the quarterly tables' columns are Q1-Q4 and FY.

It draws nothing from the RNG and decides neither which tables a report prints (`sections`) nor
how they tie out (`identities`).
"""

from __future__ import annotations

from typing import Callable

from tempering.tasks.finance.company import Company
from tempering.tasks.finance.ledger import Ledger
from tempering.tasks.finance.report import Row as R
from tempering.tasks.finance.report import Table

PPE_CLASSES = ("Land", "Buildings and improvements", "Computer equipment and software", "Construction in progress")

Series = Callable[[int], int | None]
PerYear = Callable[[list[int] | Series], dict[str, int | None]]


def write(lg: Ledger, sim: Company, years: tuple[int, ...], segments: tuple[str, ...], regions: tuple[str, ...],
          q_years: tuple[int, ...]) -> tuple[dict[str, Table], list[Table], list[dict]]:
    """Every table, written into `lg`: the tables by name (income, balance, cashflow, seg_rev,
    seg_oi, geo, inv, ppe, da, gw, debt, tax), the quarterly tables (newest first) and the debt
    tranches the debt table shows (those with a balance in a reported year)."""
    T = {y: t for t, y in enumerate(years, start=1)}  # year -> simulation index
    cols = [(str(y), str(y)) for y in reversed(years)]

    def per_year(series: list[int] | Series) -> dict[str, int | None]:
        return {str(y): (series(T[y]) if callable(series) else series[T[y]]) for y in years}

    named = dict(income=_income(lg, sim, cols, per_year), balance=_balance(lg, sim, cols, per_year),
                 cashflow=_cashflow(lg, sim, cols, per_year))
    named.update(_segments(lg, sim, cols, per_year, segments, regions))
    named.update(_asset_notes(lg, sim, cols, per_year, segments))
    shown = [tr for tr in sim.tranches if any(tr["bal"][t] for t in range(1, sim.n + 1))]
    named.update(_debt_and_tax(lg, sim, cols, per_year, shown))
    quarterly = [_quarter(lg, sim, y, T[y]) for y in reversed(q_years)]
    return named, quarterly, shown


def _income(lg: Ledger, sim: Company, cols: list, per_year: PerYear) -> Table:
    return lg.table("is", "Consolidated Statements of Operations", cols, [
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
    ])


def _balance(lg: Ledger, sim: Company, cols: list, per_year: PerYear) -> Table:
    return lg.table("bs", "Consolidated Balance Sheets", cols, [
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
        (R("ta", "Total assets", "total"), per_year(sim.assets)),
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
    ], when="end")


def _cashflow(lg: Ledger, sim: Company, cols: list, per_year: PerYear) -> Table:
    d = lambda xs: (lambda t: -(xs[t] - xs[t - 1]))  # noqa: E731 - an increase of an asset uses cash
    up = lambda xs: (lambda t: xs[t] - xs[t - 1])  # noqa: E731
    return lg.table("cf", "Consolidated Statements of Cash Flows", cols, [
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
    ])


def _segments(lg: Ledger, sim: Company, cols: list, per_year: PerYear, segments: tuple[str, ...],
              regions: tuple[str, ...]) -> dict[str, Table]:
    seg_rev = lg.table("seg-rev", "Revenue by segment", cols,
                       [(R(f"s{i}", name), per_year(sim.seg[i])) for i, name in enumerate(segments)]
                       + [(R("total", "Total revenue", "total"), per_year(sim.rev))])
    seg_oi = lg.table("seg-oi", "Operating income (loss) by segment", cols,
                      [(R(f"s{i}", name), per_year(sim.seg_oi[i])) for i, name in enumerate(segments)]
                      + [(R("corp", "Corporate and unallocated costs"), per_year(sim.corp)),
                         (R("total", "Total operating income (loss)", "total"), per_year(sim.oi))])
    geo = lg.table("geo", "Revenue by geographic area", cols,
                   [(R(f"r{i}", name), per_year(sim.geo[i])) for i, name in enumerate(regions)]
                   + [(R("total", "Total revenue", "total"), per_year(sim.rev))])
    return dict(seg_rev=seg_rev, seg_oi=seg_oi, geo=geo)


def _asset_notes(lg: Ledger, sim: Company, cols: list, per_year: PerYear,
                 segments: tuple[str, ...]) -> dict[str, Table]:
    inv = lg.table("inv", "Inventories", cols, [
        (R("raw", "Raw materials"), per_year(lambda t: sim.inv_parts[t][0])),
        (R("wip", "Work in process"), per_year(lambda t: sim.inv_parts[t][1])),
        (R("fg", "Finished goods"), per_year(lambda t: sim.inv[t] - sum(sim.inv_parts[t]))),
        (R("total", "Total inventories", "total"), per_year(sim.inv)),
    ], when="end")
    ppe = lg.table("ppe", "Property, plant and equipment", cols, [
        *((R(f"c{i}", name), per_year(lambda t, i=i: sim.ppe_parts[t][i])) for i, name in enumerate(PPE_CLASSES)),
        (R("mach", "Machinery and equipment"), per_year(lambda t: sim.gross[t] - sum(sim.ppe_parts[t]))),
        (R("gross", "Gross property, plant and equipment", "sub"), per_year(sim.gross)),
        (R("ad", "Less: accumulated depreciation"), per_year(lambda t: -sim.ad[t])),
        (R("net", "Net property, plant and equipment", "total"), per_year(sim.ppe)),
    ], when="end")
    da = lg.table("da", "Depreciation and amortization", cols, [
        (R("dep", "Depreciation of property, plant and equipment"), per_year(sim.dep)),
        (R("amort", "Amortization of intangible assets"), per_year(sim.amort)),
        (R("total", "Total depreciation and amortization", "total"), per_year(sim.da)),
    ])
    gw_rows = [(R(f"s{i}", name), per_year(sim.gw_seg[i])) for i, name in enumerate(segments)]
    gw = lg.table("gw", "Goodwill by segment", cols,
                  gw_rows + [(R("total", "Total goodwill", "total"), per_year(sim.gw))], when="end")
    return dict(inv=inv, ppe=ppe, da=da, gw=gw)


def _debt_and_tax(lg: Ledger, sim: Company, cols: list, per_year: PerYear, shown: list[dict]) -> dict[str, Table]:
    debt = lg.table("debt", "Debt", cols, [
        *((R(f"d{i}", tr["label"]), per_year(tr["bal"])) for i, tr in enumerate(shown)),
        (R("total", "Total debt", "sub"), per_year(sim.debt)),
        (R("current", "Less: current portion"), per_year(lambda t: -sim.current[t])),
        (R("ltd", "Long-term debt, net of current portion", "total"), per_year(lambda t: sim.debt[t] - sim.current[t])),
    ], when="end")
    tax = lg.table("tax", "Income tax expense", cols, [
        (R("federal", "Federal"), per_year(lambda t: sim.tax_parts[t][0])),
        (R("state", "State and local"), per_year(lambda t: sim.tax_parts[t][1])),
        (R("foreign", "Foreign"), per_year(lambda t: sim.tax_parts[t][2])),
        (R("total", "Total income tax expense", "total"), per_year(sim.tax)),
        (R("rate", "Effective tax rate", fmt="rate"),
         per_year(lambda t: round(sim.tax[t] / sim.ibt[t] * 1000) if sim.ibt[t] > 0 else None)),
    ])
    return dict(debt=debt, tax=tax)


def _quarter(lg: Ledger, sim: Company, y: int, t: int) -> Table:
    """Year y's quarterly table (t: its simulation index)."""
    q = sim.quarters[t]
    qcols = [("Q1", "Q1"), ("Q2", "Q2"), ("Q3", "Q3"), ("Q4", "Q4"), ("FY", "Full year")]
    return lg.table(f"q{y}", f"Quarterly results for fiscal {y} (unaudited)", qcols, [
        (R("revenue", "Revenue"), dict(zip([c for c, _ in qcols], q["revenue"] + [sim.rev[t]]))),
        (R("gp", "Gross profit"), dict(zip([c for c, _ in qcols], q["gp"] + [sim.gp[t]]))),
        (R("ni", "Net income (loss)"), dict(zip([c for c, _ in qcols], q["ni"] + [sim.ni[t]]))),
    ], when="quarter")


__all__ = ["PPE_CLASSES", "write"]
