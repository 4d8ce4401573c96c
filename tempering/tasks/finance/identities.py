"""The identities a report's figures satisfy: the linear equations that tie it out.

`write(ledger, ...)` records, for every reported year: each subtotal of the three statements as
the sum of its lines (costs are shown negative); assets = liabilities + equity; the cash flow
against the balance sheet (ending cash, beginning cash as last year's, working-capital changes as
differences of balances); roll-forwards from one year to the next (net income and dividends into
retained earnings, stock compensation and buy-backs into paid-in capital, capital spending into
gross PP&E, depreciation into accumulated depreciation, borrowings and repayments into debt);
segments and regions summing to revenue and operating income; each note against its statement
line; and quarters summing to the year. The ledger keeps an identity only when all its figures
exist, so those that reach into the hidden opening year drop out.

The identities that prose quotes add (a quote equals its figure) are the ledger's (`Ledger.quote`);
which identities survive in the printed report is `model.generate`'s filter.
"""

from __future__ import annotations

from typing import Callable

from tempering.tasks.finance.ledger import Ledger
from tempering.tasks.finance.report import Key

KeyOf = Callable[..., Key]  # (table, row[, column]) -> Key, the column defaulting to the year


def write(lg: Ledger, years: tuple[int, ...], n_segments: int, n_regions: int, n_tranches: int,
          q_years: tuple[int, ...], n_classes: int) -> None:
    """Every identity of a report of `years`, in a fixed order (year by year, then the quarters)."""
    for y in years:
        c, p = str(y), str(y - 1)

        def k(table: str, row: str, col: str = c) -> Key:
            return (table, row, col)

        _statements(lg, k, c)
        _cash_flow(lg, k, c, p)
        _roll_forwards(lg, k, c, p)
        _notes(lg, k, c, n_segments, n_regions, n_tranches, n_classes)
    for y in q_years:
        for row in ("revenue", "gp", "ni"):
            q = f"q{y}"
            lg.sums(f"quarterly {row} {y}", (q, row, "FY"), [(q, row, f"Q{i}") for i in range(1, 5)])
            lg.equal(f"quarterly {row} = income statement {y}", (q, row, "FY"), ("is", row, str(y)))


def _statements(lg: Ledger, k: KeyOf, c: str) -> None:
    """The income statement's and the balance sheet's subtotals; assets = liabilities + equity."""
    lg.sums(f"gross profit {c}", k("is", "gp"), [k("is", "revenue"), k("is", "cogs")])
    lg.sums(f"operating income {c}", k("is", "oi"), [k("is", "gp"), k("is", "rd"), k("is", "sga"), k("is", "da")])
    lg.sums(f"income before taxes {c}", k("is", "ibt"), [k("is", "oi"), k("is", "interest"), k("is", "other")])
    lg.sums(f"net income {c}", k("is", "ni"), [k("is", "ibt"), k("is", "tax")])
    lg.sums(f"current assets {c}", k("bs", "tca"), [k("bs", r) for r in ("cash", "ar", "inv", "prepaid")])
    lg.sums(f"total assets {c}", k("bs", "ta"), [k("bs", r) for r in ("tca", "ppe", "gw", "intang")])
    lg.sums(f"current liabilities {c}", k("bs", "tcl"), [k("bs", r) for r in ("ap", "accrued", "curdebt")])
    lg.sums(f"total liabilities {c}", k("bs", "tl"), [k("bs", r) for r in ("tcl", "ltd", "oltl")])
    lg.sums(f"equity {c}", k("bs", "te"), [k("bs", "apic"), k("bs", "re")])
    lg.sums(f"liabilities and equity {c}", k("bs", "tle"), [k("bs", "tl"), k("bs", "te")])
    lg.equal(f"assets = liabilities + equity {c}", k("bs", "ta"), k("bs", "tle"))


def _cash_flow(lg: Ledger, k: KeyOf, c: str, p: str) -> None:
    """The cash flow's subtotals, and the cash flow against the income statement and balance sheet."""
    lg.sums(f"operating cash flow {c}", k("cf", "cfo"),
            [k("cf", r) for r in ("ni", "da", "sbc", "d-ar", "d-inv", "d-prepaid", "d-ap", "d-accrued", "d-oltl")])
    lg.sums(f"investing cash flow {c}", k("cf", "cfi"), [k("cf", "capex"), k("cf", "acq")])
    lg.sums(f"financing cash flow {c}", k("cf", "cff"), [k("cf", r) for r in ("borrow", "repay", "div", "rep")])
    lg.sums(f"net change in cash {c}", k("cf", "change"), [k("cf", "cfo"), k("cf", "cfi"), k("cf", "cff")])
    lg.sums(f"ending cash {c}", k("cf", "end"), [k("cf", "begin"), k("cf", "change")])
    lg.equal(f"cash flow's ending cash = balance sheet cash {c}", k("cf", "end"), k("bs", "cash"))
    lg.equal(f"cash flow's beginning cash = last year's balance sheet cash {c}", k("cf", "begin"),
             k("bs", "cash", p))
    lg.equal(f"net income in the cash flow {c}", k("cf", "ni"), k("is", "ni"))
    lg.equal(f"D&A in the cash flow {c}", k("cf", "da"), k("is", "da"), -1)
    for row, bs_row, sign in (("d-ar", "ar", -1), ("d-inv", "inv", -1), ("d-prepaid", "prepaid", -1),
                              ("d-ap", "ap", 1), ("d-accrued", "accrued", 1), ("d-oltl", "oltl", 1)):
        lg.identity(f"change in {bs_row} {c}", (1, k("cf", row)), (-sign, k("bs", bs_row)),
                    (sign, k("bs", bs_row, p)))


def _roll_forwards(lg: Ledger, k: KeyOf, c: str, p: str) -> None:
    """Net income and dividends into retained earnings, stock compensation and buy-backs into
    paid-in capital, capital spending into gross PP&E, depreciation into accumulated
    depreciation, borrowings and repayments into debt."""
    lg.identity(f"retained earnings roll-forward {c}", (1, k("bs", "re")), (-1, k("bs", "re", p)),
                (-1, k("is", "ni")), (-1, k("cf", "div")))
    lg.identity(f"paid-in capital roll-forward {c}", (1, k("bs", "apic")), (-1, k("bs", "apic", p)),
                (-1, k("cf", "sbc")), (-1, k("cf", "rep")))
    lg.identity(f"gross PP&E roll-forward {c}", (1, k("ppe", "gross")), (-1, k("ppe", "gross", p)),
                (1, k("cf", "capex")))
    lg.identity(f"accumulated depreciation roll-forward {c}", (1, k("ppe", "ad")), (-1, k("ppe", "ad", p)),
                (1, k("da", "dep")))
    lg.identity(f"debt roll-forward {c}", (1, k("debt", "total")), (-1, k("debt", "total", p)),
                (-1, k("cf", "borrow")), (-1, k("cf", "repay")))


def _notes(lg: Ledger, k: KeyOf, c: str, n_segments: int, n_regions: int, n_tranches: int, n_classes: int) -> None:
    """Segments, regions and each note's table: their totals, and the totals against the statements."""
    lg.sums(f"segment revenue {c}", k("seg-rev", "total"), [k("seg-rev", f"s{i}") for i in range(n_segments)])
    lg.equal(f"segment revenue = revenue {c}", k("seg-rev", "total"), k("is", "revenue"))
    lg.sums(f"segment operating income {c}", k("seg-oi", "total"),
            [k("seg-oi", f"s{i}") for i in range(n_segments)] + [k("seg-oi", "corp")])
    lg.equal(f"segment operating income = operating income {c}", k("seg-oi", "total"), k("is", "oi"))
    lg.sums(f"regional revenue {c}", k("geo", "total"), [k("geo", f"r{i}") for i in range(n_regions)])
    lg.equal(f"regional revenue = revenue {c}", k("geo", "total"), k("is", "revenue"))
    lg.sums(f"inventories {c}", k("inv", "total"), [k("inv", r) for r in ("raw", "wip", "fg")])
    lg.equal(f"inventories note = balance sheet {c}", k("inv", "total"), k("bs", "inv"))
    lg.sums(f"gross PP&E {c}", k("ppe", "gross"), [k("ppe", f"c{i}") for i in range(n_classes)] + [k("ppe", "mach")])
    lg.sums(f"net PP&E {c}", k("ppe", "net"), [k("ppe", "gross"), k("ppe", "ad")])
    lg.equal(f"PP&E note = balance sheet {c}", k("ppe", "net"), k("bs", "ppe"))
    lg.sums(f"depreciation and amortization {c}", k("da", "total"), [k("da", "dep"), k("da", "amort")])
    lg.equal(f"D&A note = income statement {c}", k("da", "total"), k("is", "da"), -1)
    lg.sums(f"goodwill {c}", k("gw", "total"), [k("gw", f"s{i}") for i in range(n_segments)])
    lg.equal(f"goodwill note = balance sheet {c}", k("gw", "total"), k("bs", "gw"))
    lg.sums(f"debt {c}", k("debt", "total"), [k("debt", f"d{i}") for i in range(n_tranches)])
    lg.sums(f"long-term debt {c}", k("debt", "ltd"), [k("debt", "total"), k("debt", "current")])
    lg.equal(f"current debt note = balance sheet {c}", k("debt", "current"), k("bs", "curdebt"), -1)
    lg.equal(f"long-term debt note = balance sheet {c}", k("debt", "ltd"), k("bs", "ltd"))
    lg.sums(f"income taxes {c}", k("tax", "total"), [k("tax", r) for r in ("federal", "state", "foreign")])
    lg.equal(f"tax note = income statement {c}", k("tax", "total"), k("is", "tax"), -1)


__all__ = ["write"]
