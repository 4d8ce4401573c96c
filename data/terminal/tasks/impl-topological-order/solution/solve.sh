#!/bin/bash
cat > /app/deps.py <<'EOF'
"""Ordering packages by their dependencies."""

import heapq


class CycleError(Exception):
    def __init__(self, cycle):
        super().__init__(f"dependency cycle among: {', '.join(cycle)}")
        self.cycle = cycle


def build_order(deps):
    nodes = set(deps) | {d for ds in deps.values() for d in ds}
    missing = {n: set(deps.get(n, ())) for n in nodes}
    users = {n: set() for n in nodes}
    for n, ds in missing.items():
        for d in ds:
            users[d].add(n)
    ready = [n for n in nodes if not missing[n]]
    heapq.heapify(ready)
    order = []
    while ready:
        n = heapq.heappop(ready)
        order.append(n)
        for u in users[n]:
            missing[u].discard(n)
            if not missing[u]:
                heapq.heappush(ready, u)
    if len(order) != len(nodes):
        raise CycleError(sorted(nodes - set(order)))
    return order
EOF
