"""The ledger: the report's tables, figures, identities and prose quotes as they are written.

`Ledger.table` stores a table and its figures under their keys; `identity`, `sums` and `equal`
record an equation between figures (only when all of them exist); `quote` writes a figure into
prose as a figure of its own ("prose", "m<i>", ""), equal to the quoted one. `model.generate`
then keeps what the report prints.

It decides neither which tables nor which identities a report has (`tables`, `identities`) nor
what the prose says (`sections`).
"""

from __future__ import annotations

from tempering.tasks.finance.formats import money_words
from tempering.tasks.finance.report import Identity, Key, Row, Table


class Ledger:
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


__all__ = ["Ledger"]
