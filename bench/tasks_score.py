"""`tempering tasks score` from a script: many answers in one `--answers` call against one call each.

Writes each task's reference as its answer for 40 domains (the five demo ones, the seven cad
ones, ten finance ones, the two heavy reasoning ones and sixteen more) x 12 seeds, then times
one `--answers` call over all of them, the same call over the first answer of each domain, and
single calls (`--answer-file` or `--turns-file`) for those first answers. Every answer must score
1. Prints one JSON object: seconds of each, and the single calls extrapolated to every answer.
Usage: python bench/tasks_score.py [--seeds 12] [--singles 40]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tempering.oracle import draw
from tempering.tasks import domains


def answers(seeds: int) -> list[dict]:
    known = domains()
    family = {f: sorted(n for n, d in known.items() if d.family == f) for f in ("cad", "finance", "reasoning")}
    heavy = [n for n in family["reasoning"] if known[n].heavy][:2]
    names = (["arithmetic", "code", "files", "sorting", "strings"] + family["cad"] + family["finance"][:10] + heavy
             + [n for n in family["reasoning"] if n not in heavy][:16])
    rows = []
    for name in names:
        for seed in range(seeds):
            turns = list(draw(known[name], 1, seed)[0].reference_turns)
            rows.append({"domain": name, "seed": seed, **({"answer": turns[0]} if len(turns) == 1 else {"turns": turns})})
    return rows


def tempering(*args: str) -> tuple[float, list[dict]]:
    start = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "tempering.cli", "tasks", "score", *args, "--json"], capture_output=True,
                       text=True, check=True)
    out = [json.loads(line) for line in r.stdout.splitlines()]
    assert all(row["components"]["outcome"] == 1.0 for row in out), r.stdout[-2000:]
    return time.perf_counter() - start, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=12)
    ap.add_argument("--singles", type=int, default=40, help="single calls timed (the first answer of each domain)")
    args = ap.parse_args()
    rows = answers(args.seeds)
    firsts = list({row["domain"]: row for row in reversed(rows)}.values())[::-1]
    with tempfile.TemporaryDirectory() as tmp:
        every, first, one = Path(tmp, "all.jsonl"), Path(tmp, "first.jsonl"), Path(tmp, "one")
        every.write_text("".join(json.dumps(row) + "\n" for row in rows))
        first.write_text("".join(json.dumps(row) + "\n" for row in firsts))
        batch_s, _ = tempering("--answers", str(every))
        firsts_s, _ = tempering("--answers", str(first))
        singles = []
        for row in firsts[:args.singles]:
            one.write_text(row["answer"] if "answer" in row else json.dumps({"turns": row["turns"]}))
            flag = "--answer-file" if "answer" in row else "--turns-file"
            singles.append(tempering(row["domain"], "--seed", str(row["seed"]), flag, str(one))[0])
    per_call = sum(singles) / len(singles)
    print(json.dumps({"domains": len(firsts), "answers": len(rows), "batch_s": round(batch_s, 1),
                      "batch_first_answers_s": round(firsts_s, 1), "single_calls": len(singles),
                      "single_calls_s": round(sum(singles), 1), "single_call_mean_s": round(per_call, 2),
                      "single_calls_for_every_answer_s": round(per_call * len(rows))}, indent=2))


if __name__ == "__main__":
    main()
