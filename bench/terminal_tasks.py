"""Every shipped terminal task through the Harbor runner: its oracle must score 1 and a no-op 0
(`tempering tasks check-shipped terminal` over all of them; CI checks a fixed sample). Prints one JSON
object: how many tasks passed, which did not and why, and the seconds per task.
Usage: python bench/terminal_tasks.py [--kind hand-written|generated]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

from tempering.tasks import terminal


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kind", choices=(terminal.HAND_WRITTEN, terminal.GENERATED))
    args = ap.parse_args()
    names = terminal.names(args.kind)
    start = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "tempering.cli", "tasks", "check-shipped", "terminal", "--json",
                        "--tasks", *names],
                       capture_output=True, text=True)
    wall = time.perf_counter() - start
    rows = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
    failed = [{"task": row["task"], "oracle": row["oracle"], "noop": row["noop"], "reason": row["reason"]}
              for row in rows if not row["ok"]]
    print(json.dumps({"tasks": len(names), "checked": len(rows), "passed": len(rows) - len(failed),
                      "failed": failed, "wall_s": round(wall, 1), "s_per_task": round(wall / max(len(names), 1), 2),
                      "exit_code": r.returncode, "stderr_tail": r.stderr[-500:] if r.returncode not in (0, 1) else ""},
                     indent=2))


if __name__ == "__main__":
    main()
