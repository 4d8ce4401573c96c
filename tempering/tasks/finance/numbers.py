"""Reading the figures in an answer: signs, parentheses, currency, thousands separators, scales
and percentages.

`quantities(text)` finds every figure written in `text`; `answer_quantity(text)` the one an answer
gives (its last figure that is not a bare year). A `Quantity` keeps how it was written: its value
with any scale applied ("1.2m" is 1,200,000), whether a scale was written at all (a bare figure is
in the unit the question asks for), and whether it is a percentage or a multiple ("1.8x"). What a
figure has to match is the verifier's business (`tempering.tasks.finance.questions.judge`).

Understood: "(1,234.5)" and "-1,234.5" and "−1,234.5" (negative), "+5", "$", "US$", "USD", "€",
"£", "EUR", "GBP", "dollars" before or after, "1,234,567" (groups of three), "3.4e6",
".5", scales "thousand"/"k", "million"/"m"/"mm"/"mn"/"mln", "billion"/"b"/"bn"/"bln",
"trillion"/"tn", percentages "12.5%"/"12.5 percent"/"12.5 pct"/"12.5 pp"/"percentage points",
multiples "1.85x"/"1.85 times". Not understood: European separators ("1.234,5" reads as 1.234
and 5), numbers in words ("twelve").
"""

from __future__ import annotations

import re
from dataclasses import dataclass

SCALES = {"thousand": 1e3, "thousands": 1e3, "k": 1e3, "million": 1e6, "millions": 1e6, "m": 1e6, "mm": 1e6,
          "mn": 1e6, "mln": 1e6, "billion": 1e9, "billions": 1e9, "b": 1e9, "bn": 1e9, "bln": 1e9,
          "trillion": 1e12, "trillions": 1e12, "tn": 1e12}

_CUR = r"(?:US\$|USD|EUR|GBP|\$|€|£)"
_SCALE = r"(?:thousands?|millions?|billions?|trillions?|bln|mln|bn|mn|mm|tn|k|m|b)"
_PCT = r"(?:%|percent(?:age\s+points?)?|per\s+cent|pct|pp|p\.p\.)"  # read in a VERBOSE pattern: \s, not spaces
_NUMBER = re.compile(rf"""
    (?<![\w.,])                               # not inside a word or another number
    (?P<sign1>[-+−–])?\s*
    (?P<cur0>{_CUR})?\s*
    (?P<open>\()?\s*
    (?P<cur1>{_CUR})?\s*
    (?P<sign2>[-+−–])?\s*
    (?P<num>(?:\d{{1,3}}(?:,\d{{3}})+|\d+)(?:\.\d+)?|\.\d+)
    (?P<exp>[eE][-+]?\d{{1,3}})?
    (?!\d|,\d)                                # "1,2345" is no figure
    (?:\s*(?P<scale>{_SCALE})(?![a-zA-Z]))?
    (?:\s*(?P<cur2>USD|EUR|GBP|US\s+dollars|dollars)(?![a-zA-Z]))?
    (?:\s*(?P<close>\)))?
    (?:\s*(?P<scale2>{_SCALE})(?![a-zA-Z]))?
    (?:\s*(?P<pct>{_PCT})(?![a-zA-Z]))?
    (?:\s*(?P<times>x|times)(?![a-zA-Z]))?
""", re.VERBOSE | re.IGNORECASE)


@dataclass(frozen=True)
class Quantity:
    value: float  # signed, with any written scale applied; a percentage as written (12.5 for 12.5%)
    scaled: bool  # a scale was written ("m", "billion")
    percent: bool
    times: bool  # a multiple ("1.8x")
    currency: bool
    text: str
    bare_year: bool = False  # a plain four-digit year (2023): most likely not the answer's figure


def quantities(text: str) -> list[Quantity]:
    out = []
    for m in _NUMBER.finditer(text):
        g = m.groupdict()
        digits = g["num"].replace(",", "") + (g["exp"] or "")
        try:
            value = float(digits)
        except ValueError:  # pragma: no cover - the pattern admits only numbers
            continue
        written = g["scale"] or g["scale2"] or ""
        scale = written.lower()
        # "m" after a figure is a million, but "5 m" in running text may be metres: accept it only
        # attached to the figure or together with a currency
        currency = bool(g["cur0"] or g["cur1"] or g["cur2"])
        if scale in ("m", "b", "k") and re.search(r"\s" + re.escape(written) + r"\W*$", m.group(0)) and not currency:
            scale = ""
        if scale:
            value *= SCALES[scale]
        negative = sum(1 for s in (g["sign1"], g["sign2"]) if s and s in "-−–") % 2 == 1
        if g["open"] and g["close"]:
            negative = not negative
        text_span = m.group(0).strip()
        if g["open"] and not g["close"]:  # "(" was only an opening bracket of the sentence
            text_span = text_span.lstrip("(").strip()
        plain = not (g["sign1"] or g["sign2"] or g["open"] or currency or written or g["pct"] or g["times"] or g["exp"])
        year = plain and re.fullmatch(r"(19|20)\d\d", g["num"]) is not None
        out.append(Quantity(-value if negative else value, bool(scale), bool(g["pct"]), bool(g["times"]),
                            currency, text_span, year))
    return out


def parse_quantity(text: str) -> Quantity | None:
    """`text` as one figure (nothing else in it but spaces), or None."""
    found = quantities(text)
    if len(found) != 1:
        return None
    rest = _NUMBER.sub("", text, count=1).strip()
    return found[0] if not rest else None


def answer_quantity(text: str) -> Quantity | None:
    """The figure an answer gives: its last figure that is not a bare year (or the last year,
    when it gives nothing else)."""
    found = quantities(text)
    if not found:
        return None
    figures = [q for q in found if not q.bare_year]
    return (figures or found)[-1]
