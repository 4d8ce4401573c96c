"""The report's body: its sections in reading order, and the prose in them.

`write(ledger, rng, size, ...)` lays out the cover, the table of contents, the letter to
shareholders, risk factors, management's discussion (every pair of years and every segment, or
the latest pair only), the liquidity paragraph, the statements and the notes with their tables;
a brief report (`notes` off) ends after the statements and the segment table. Prose quotes
figures through `Ledger.quote`, which makes each quote a figure of its own tied to the table's.
Long reports get risk factors until the text reaches the size's `target_chars`.

The tables themselves are `tables`' and the boilerplate words `words`'; which of the written
tables and figures the report keeps (those the body shows) is `model.generate`'s filter.
"""

from __future__ import annotations

import random

from tempering.tasks.finance import words
from tempering.tasks.finance.ledger import Ledger
from tempering.tasks.finance.report import Block, Contents, Heading, PageBreak, Para, Table


def write(lg: Ledger, rng: random.Random, size: dict, company: str, unit: str, years: tuple[int, ...],
          segments: tuple[str, ...], t: dict[str, Table], quarterly: list[Table]) -> list[Block]:
    """The body's blocks; `t` holds the tables by name (as `tables.write` returns them)."""
    notes = size["notes"]
    body = _cover(company, unit, years, segments, notes) + _letter(lg, years)
    if notes:
        body.append(Heading("Risk factors", 1))
    n_risks = rng.randint(*size["risks"])
    for i in range(n_risks):
        body += _risk(rng, size, i + 1)
    risks_end = len(body)
    body += _discussion(lg, rng, size, years, segments)
    if not notes:
        return body + [Heading("Consolidated financial statements", 1), t["income"], t["balance"], t["cashflow"],
                       t["seg_rev"]]
    body += _liquidity(lg, years[-1])
    body += [PageBreak(), Heading("Consolidated financial statements", 1), t["income"], t["balance"], t["cashflow"]]
    body += _notes(size, segments, t, quarterly)
    target = size["target_chars"]
    if target:
        have = _approx_chars(body)
        extra: list[Block] = []
        while have < target:
            section = _risk(rng, size, n_risks + 1)
            n_risks += 1
            extra += section
            have += _approx_chars(section)
        body[risks_end:risks_end] = extra
    return body


def _cover(company: str, unit: str, years: tuple[int, ...], segments: tuple[str, ...], notes: bool) -> list[Block]:
    last, first = years[-1], years[0]
    listing = ", ".join(segments[:-1]) + f" and {segments[-1]}" if len(segments) > 1 else segments[0]
    body: list[Block] = [
        Heading(company, 0), Para(f"Annual Report for fiscal {last}"),
        Para(f"{company} designs, makes and sells products and services through {len(segments)} reportable "
             f"segments: {listing}. This report covers fiscal years {first} to {last}. All amounts are in "
             f"{unit} of US dollars unless stated otherwise; per-share amounts are in US dollars."),
    ]
    if notes:
        body += [Heading("Contents", 2), Contents(), PageBreak()]
    return body


def _letter(lg: Ledger, years: tuple[int, ...]) -> list[Block]:
    last = years[-1]
    ls = str(last)
    rev = lambda y: ("is", "revenue", str(y))  # noqa: E731
    ni = ("is", "ni", ls)
    g = _pct(lg.cells[rev(last)], lg.cells[rev(last - 1)])
    letter = (f"Dear shareholders, in fiscal {last} revenue was {lg.quote(rev(last))}, "
              f"{'up' if g >= 0 else 'down'} {abs(g):.1f}% from fiscal {last - 1}. ")
    letter += (f"Net income was {lg.quote(ni)}. " if lg.cells[ni] >= 0 else f"The net loss was {lg.quote(ni)}. ")
    cfo = ("cf", "cfo", ls)
    letter += (f"Operating activities provided {lg.quote(cfo)} of cash. " if lg.cells[cfo] >= 0
               else f"Operating activities used {lg.quote(cfo)} of cash. ")
    letter += "We thank our partners and shareholders for their continued support."
    return [Heading("Letter to shareholders", 1), Para(letter)]


def _risk(rng: random.Random, size: dict, number: int) -> list[Block]:
    """Risk factor `number`: its heading and paragraphs."""
    parts = words.risk_section(rng, number, rng.randint(*size["risk_paragraphs"]))
    return [Heading(text, 2) if kind == "heading" else Para(text) for kind, text in parts]


def _discussion(lg: Ledger, rng: random.Random, size: dict, years: tuple[int, ...],
                segments: tuple[str, ...]) -> list[Block]:
    """Management's discussion: one subsection per pair of years, newest first."""
    body: list[Block] = []
    if size["notes"]:
        body.append(Heading("Management's discussion and analysis", 1))
    rev = lambda y: ("is", "revenue", str(y))  # noqa: E731
    pairs = [(y, y - 1) for y in reversed(years[1:])]
    if not size["mdna_segments"]:
        pairs = pairs[:1]
    for y, p in pairs:
        body.append(Heading(f"Fiscal {y} compared with fiscal {p}", 2))
        ry, rp = lg.cells[rev(y)], lg.cells[rev(p)]
        gm_y = lg.cells[("is", "gp", str(y))] / ry * 100
        gm_p = lg.cells[("is", "gp", str(p))] / rp * 100
        text = (f"Revenue was {lg.quote(rev(y))} in fiscal {y} compared with {lg.quote(rev(p))} in fiscal {p}, "
                f"{'an increase' if ry >= rp else 'a decrease'} of {abs(_pct(ry, rp)):.1f}%. Gross margin was "
                f"{gm_y:.1f}% compared with {gm_p:.1f}%. ")
        oi = ("is", "oi", str(y))
        text += (f"Operating income was {lg.quote(oi)}." if lg.cells[oi] >= 0
                 else f"The operating loss was {lg.quote(oi)}.")
        body.append(Para(text))
        if size["mdna_segments"]:
            for i, name in enumerate(segments):
                k_y, k_p = ("seg-rev", f"s{i}", str(y)), ("seg-rev", f"s{i}", str(p))
                change = _pct(lg.cells[k_y], lg.cells[k_p])
                body.append(Para(f"{name}: revenue of the segment was {lg.quote(k_y)} in fiscal {y}, "
                                 f"{'up' if change >= 0 else 'down'} {abs(change):.1f}% from {lg.quote(k_p)}. "
                                 f"{words.risk_paragraph(rng, 'demand in the segment').split('. ', 1)[1]}"))
    return body


def _liquidity(lg: Ledger, last: int) -> list[Block]:
    ls = str(last)
    return [Heading("Liquidity and capital resources", 2),
            Para(f"At the end of fiscal {last}, cash and cash equivalents were {lg.quote(('bs', 'cash', ls))} "
                 f"and total debt was {lg.quote(('debt', 'total', ls))}. We believe that cash from operations "
                 "and our credit facilities will be sufficient to meet our needs for the next twelve months.")]


def _notes(size: dict, segments: tuple[str, ...], t: dict[str, Table], quarterly: list[Table]) -> list[Block]:
    body: list[Block] = [Heading("Notes to the consolidated financial statements", 1),
                         Heading("Note 1. Basis of presentation", 2), Para(words.BASIS)]
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
    return body


def _pct(a: int, b: int) -> float:
    return (a - b) / abs(b) * 100 if b else 0.0


def _approx_chars(body: list[Block]) -> int:
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


__all__ = ["write"]
