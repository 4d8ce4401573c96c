#!/bin/bash
cd /app
python3 - <<'EOF'
from pathlib import Path
p = Path("roman.py")
s = p.read_text()
s = s.replace("""    total = 0
    for ch in s:
        if ch not in _DIGITS:
            raise ValueError(f"not a Roman digit: {ch!r}")
        total += _DIGITS[ch]
    return total""", """    total = 0
    for i, ch in enumerate(s):
        if ch not in _DIGITS:
            raise ValueError(f"not a Roman digit: {ch!r}")
        value = _DIGITS[ch]
        if i + 1 < len(s) and s[i + 1] in _DIGITS and _DIGITS[s[i + 1]] > value:
            total -= value
        else:
            total += value
    return total""")
p.write_text(s)
EOF
