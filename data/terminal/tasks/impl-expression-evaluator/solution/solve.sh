#!/bin/bash
cat > /app/calc.py <<'EOF'
"""Integer arithmetic expressions."""

import re

_TOKEN = re.compile(r"\s*(?:(\d+)|(.))")


def _tokens(expression):
    out = []
    for number, other in _TOKEN.findall(expression):
        if number:
            out.append(int(number))
        elif other.strip():
            if other not in "+-*/()":
                raise ValueError(f"unexpected {other!r}")
            out.append(other)
    return out


def evaluate(expression):
    tokens = _tokens(expression)
    pos = 0

    def peek():
        return tokens[pos] if pos < len(tokens) else None

    def take():
        nonlocal pos
        if pos >= len(tokens):
            raise ValueError("unexpected end of expression")
        pos += 1
        return tokens[pos - 1]

    def expr():
        value = term()
        while peek() in ("+", "-"):
            value = value + term() if take() == "+" else value - term()
        return value

    def term():
        value = unary()
        while peek() in ("*", "/"):
            op = take()
            rhs = unary()
            if op == "*":
                value *= rhs
            else:
                if rhs == 0:
                    raise ZeroDivisionError("division by zero")
                q = abs(value) // abs(rhs)
                value = q if (value >= 0) == (rhs > 0) else -q
        return value

    def unary():
        if peek() in ("+", "-"):
            sign = take()
            value = unary()
            return -value if sign == "-" else value
        return atom()

    def atom():
        tok = take()
        if tok == "(":
            value = expr()
            if take() != ")":
                raise ValueError("expected )")
            return value
        if isinstance(tok, int):
            return tok
        raise ValueError(f"unexpected {tok!r}")

    value = expr()
    if pos != len(tokens):
        raise ValueError(f"unexpected {tokens[pos]!r}")
    return value
EOF
