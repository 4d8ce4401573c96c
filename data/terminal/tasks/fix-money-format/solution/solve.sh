#!/bin/bash
cat > /app/money.py <<'EOF'
"""Dollar amounts held as integer cents."""


def format_cents(cents):
    sign = "-" if cents < 0 else ""
    dollars, rest = divmod(abs(cents), 100)
    return f"{sign}${dollars:,}.{rest:02d}"


def parse_dollars(text):
    text = text.strip()
    sign = -1 if text.startswith("-") else 1
    text = text.lstrip("-").lstrip("$").replace(",", "")
    whole, _, frac = text.partition(".")
    return sign * (int(whole or 0) * 100 + int((frac + "00")[:2]))
EOF
