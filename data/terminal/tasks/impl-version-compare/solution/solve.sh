#!/bin/bash
cat > /app/versions.py <<'EOF'
"""Comparing semantic versions."""

import functools
import re

_RE = re.compile(r"(\d+)\.(\d+)\.(\d+)(?:-([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?(?:\+[0-9A-Za-z.-]+)?")


def _key(v):
    m = _RE.fullmatch(v)
    if not m:
        raise ValueError(f"not a version: {v!r}")
    core = tuple(int(x) for x in m.group(1, 2, 3))
    pre = m.group(4)
    return core, pre.split(".") if pre else None


def _cmp(x, y):
    return (x > y) - (x < y)


def _cmp_ident(a, b):
    if a.isdigit() and b.isdigit():
        return _cmp(int(a), int(b))
    if a.isdigit() != b.isdigit():
        return -1 if a.isdigit() else 1
    return _cmp(a, b)


def compare(a, b):
    (ca, pa), (cb, pb) = _key(a), _key(b)
    if ca != cb:
        return _cmp(ca, cb)
    if pa is None or pb is None:
        return _cmp(pa is None, pb is None)
    for x, y in zip(pa, pb):
        c = _cmp_ident(x, y)
        if c:
            return c
    return _cmp(len(pa), len(pb))


def sort_versions(items):
    return sorted(items, key=functools.cmp_to_key(compare))
EOF
