"""What a report is: its `Spec`, its blocks and tables, its figures and the identities between them.

A report is stored as data: `body` is the blocks in reading order (headings, paragraphs, tables,
page breaks, the table of contents); every figure is an integer in the report's unit (thousands
or millions of US dollars; cents for per-share amounts, tenths of a percent for rates) stored
once in `cells` under its `Key` (table, row, column), and tables and prose refer to keys. An
`Identity` is a linear equation between figures (sum of coefficient × figure = 0); `broken()`
lists those an altered figure breaks. `SIZES` holds the ranges each report size is drawn from.

This module only defines these types; `model.generate` fills them in (the simulated company in
`company`, the tables in `tables`, the identities in `identities`, the prose in `sections`), and
`formats` says how a figure is printed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

Key = tuple[str, str, str]  # (table, row, column); prose quotes are ("prose", "m<i>", "")

UNITS = {"thousands": 1_000, "millions": 1_000_000}

# Per size: (low, high) ranges drawn per report. `quarters`: how many of the latest years have a
# quarterly table (0 = all); `risks` risk factors of `risk_paragraphs` paragraphs each;
# `mdna_segments`: the discussion covers every pair of years and every segment (else the latest
# pair only); `notes`: the notes are printed (a brief report has the statements and segments only,
# on about two pages); `target_chars`: risk factors are added until the markdown is at least this
# long (long reports: 100k+ tokens at ~4 characters a token).
SIZES: dict[str, dict[str, int | bool | tuple[int, int]]] = {
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


__all__ = ["Block", "Contents", "Heading", "Identity", "Key", "PageBreak", "Para", "Report", "Row", "SIZES", "Spec",
           "Table", "UNITS"]
