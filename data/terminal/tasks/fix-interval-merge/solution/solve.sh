#!/bin/bash
cat > /app/intervals.py <<'EOF'
"""Merging closed intervals."""


def merge(intervals):
    result = []
    for start, end in sorted(intervals):
        if result and start <= result[-1][1]:
            last_start, last_end = result[-1]
            result[-1] = (last_start, max(last_end, end))
        else:
            result.append((start, end))
    return result
EOF
