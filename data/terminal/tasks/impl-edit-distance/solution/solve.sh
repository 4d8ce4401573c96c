#!/bin/bash
cat > /app/fuzzy.py <<'EOF'
"""Edit distance and fuzzy matching."""


def distance(a, b):
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return prev[-1]


def closest(word, candidates, max_distance=None):
    best, best_d = None, None
    for c in candidates:
        dist = distance(word, c)
        if max_distance is not None and dist > max_distance:
            continue
        if best_d is None or dist < best_d:
            best, best_d = c, dist
    return best
EOF
