#!/bin/bash
cat > /app/rle.py <<'EOF'
"""Run-length encoding: "aaab" <-> "3a1b"."""

import itertools
import re


def encode(text):
    return "".join(f"{len(list(group))}{ch}" for ch, group in itertools.groupby(text))


def decode(code):
    out, pos = [], 0
    for m in re.finditer(r"(\d+)(\D)", code):
        if m.start() != pos or int(m.group(1)) == 0:
            raise ValueError(f"malformed run-length code at {pos}")
        out.append(m.group(2) * int(m.group(1)))
        pos = m.end()
    if pos != len(code):
        raise ValueError(f"malformed run-length code at {pos}")
    return "".join(out)
EOF
