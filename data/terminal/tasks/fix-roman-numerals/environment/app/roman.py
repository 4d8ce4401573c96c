"""Roman numerals."""

_VALUES = [(1000, "M"), (900, "CM"), (500, "D"), (400, "CD"), (100, "C"), (90, "XC"),
           (50, "L"), (40, "XL"), (10, "X"), (9, "IX"), (5, "V"), (4, "IV"), (1, "I")]
_DIGITS = {"I": 1, "V": 5, "X": 10, "L": 50, "C": 100, "D": 500, "M": 1000}


def to_roman(n):
    if not 0 < n < 4000:
        raise ValueError("only 1..3999 have a Roman numeral")
    out = []
    for value, letters in _VALUES:
        while n >= value:
            out.append(letters)
            n -= value
    return "".join(out)


def from_roman(s):
    s = s.upper()
    if not s:
        raise ValueError("empty numeral")
    total = 0
    for ch in s:
        if ch not in _DIGITS:
            raise ValueError(f"not a Roman digit: {ch!r}")
        total += _DIGITS[ch]
    return total
