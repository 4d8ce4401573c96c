"""The altered figure: which figures may be altered, altering one, and how a line item is named.

`tamper_candidates(report)` lists the figures whose alteration exactly one figure explains: a
money figure in a table, at least 20 units, in two identities or more whose pattern (which
identities, with which signs) no other figure shares, and whose label no other row has.
`tamper(report)` picks one by `Spec.tamper`'s seed and moves it by 5-25% without changing its
sign, keeping the true value in `Report.original`. `label_key` is how a label is compared, both
here (labels must be unique) and when an answer names the altered line item (`questions`).

It does not decide whether a report is altered (`model.generate` calls `tamper` when
`Spec.tamper` is set) nor ask about it (`questions.inconsistency`).
"""

from __future__ import annotations

import random
import re

from tempering.tasks.finance.report import Key, Report

_FILLER = {"the", "a", "an", "line", "item", "statement", "statements", "consolidated", "fiscal", "fy", "year", "in",
           "of", "on", "for", "table", "note", "row", "figure", "amount"}


def label_key(label: str) -> str:
    """A label as answers are compared: lower case, words only, without filler words and years."""
    text = label.lower().replace("&", " and ")
    tokens = re.findall(r"[a-z0-9]+", text)
    return " ".join(t for t in tokens if t not in _FILLER and not re.fullmatch(r"(19|20)\d\d", t))


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


def tamper(report: Report) -> None:
    """Alter one of `report`'s candidate figures in place, chosen by its spec's `tamper` seed."""
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


__all__ = ["label_key", "tamper", "tamper_candidates"]
