"""Dollar amounts held as integer cents."""


def format_cents(cents):
    dollars, rest = divmod(cents, 100)
    return f"${dollars:,}.{rest:02d}"


def parse_dollars(text):
    text = text.strip()
    sign = -1 if text.startswith("-") else 1
    text = text.lstrip("-").lstrip("$").replace(",", "")
    whole, _, frac = text.partition(".")
    return sign * (int(whole or 0) * 100 + int((frac + "00")[:2]))
