"""Every domain's check over many tasks: the oracle scores 1, an empty answer and junk answers 0
(`tempering tasks check --per-domain N` over all families; CI checks one task per domain).
Prints one JSON object: tasks checked per family, the failures with their reasons, seconds.
Usage: python bench/domain_check.py [--per-domain 10] [--seed 0] [FAMILY ...]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections import Counter


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("families", nargs="*")
    ap.add_argument("--per-domain", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    start = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "tempering.cli", "tasks", "check", "--json", "--per-domain",
                        str(args.per_domain), "--seed", str(args.seed), *args.families], capture_output=True, text=True)
    rows = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
    print(json.dumps({
        "tasks": len(rows), "domains": len({row["domain"] for row in rows}),
        "per_family": dict(Counter(row["domain"].split("/")[0] for row in rows)),
        "failed": [{"task": row["task"], "failures": row["failures"]} for row in rows if not row["ok"]],
        "seconds": round(time.perf_counter() - start, 1), "exit_code": r.returncode,
        "stderr_tail": r.stderr[-500:] if r.returncode not in (0, 1) else ""}, indent=2))


if __name__ == "__main__":
    main()
