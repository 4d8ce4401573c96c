#!/bin/bash
cd /app
python3 - <<'EOF'
from pathlib import Path
p = Path("search.py")
s = p.read_text()
start = s.index("def find_first")
end = s.index("def find_last")
s = s[:start] + """def find_first(items, target):
    lo, hi = 0, len(items)
    while lo < hi:
        mid = (lo + hi) // 2
        if items[mid] < target:
            lo = mid + 1
        else:
            hi = mid
    if lo < len(items) and items[lo] == target:
        return lo
    return -1


""" + s[end:]
p.write_text(s)
EOF
