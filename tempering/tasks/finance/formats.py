"""How a figure is written: in a table (`fmt_value`), in an answer (`fmt_signed`), in prose
(`money_words`).

Figures are integers in the report's unit (see `report`); these functions only turn one into
text. They do not parse figures back (that is `numbers`) nor lay tables out (`layout`).
"""

from __future__ import annotations


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


__all__ = ["fmt_signed", "fmt_value", "money_words"]
