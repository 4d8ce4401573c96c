"""The junk audit: for a dataset and several seeds, the oracle answer must score 1.0 and junk
must score 0, each given as a whole reply (answer tags included) to the domain's `grade`.

Junk: an empty answer, "0", random text, the question copied back, long lists of numbers (comma-,
newline-separated and as a JSON list), empty JSON containers, a 4,000-digit number, a number with
a huge exponent, deeply nested brackets, and the answer tags with nothing in them. A junk reply
that is in fact the entry's answer (an oracle "0") is skipped for that entry; an entry that `make`
would not draw (`entries.undrawable`) is skipped and reported.
`python -m tempering.tasks.reasoning.audit [--seeds N] [DATASET ...]` (or bench/reasoning_audit.py)
prints the report as JSON.
"""

from __future__ import annotations

import json
import random
import signal
import string
import sys
import threading
import time
from dataclasses import dataclass, field

from tempering.records import Task
from tempering.tasks.reasoning import entries
from tempering.tasks.reasoning.catalog import EXCLUDED, FIXED, domain_datasets
from tempering.tasks.reasoning.domain import answer_block, grade
from tempering.tasks.reasoning.entries import undrawable

SEEDS = (0, 1, 2)
NUMBERS = [str(i) for i in range(1000)]


def junk(question: str) -> dict[str, str]:
    """Junk replies, each a complete reply text (tags included)."""
    rng = random.Random(0)
    words = " ".join("".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(2, 9))) for _ in range(30))
    inside = {"empty": "", "zero": "0", "random_text": words, "question": question,
              "numbers": ", ".join(NUMBERS), "number_lines": "\n".join(NUMBERS),
              "number_list": json.dumps(list(range(1000))),
              "empty_list": "[]", "empty_object": "{}",
              # what would make a careless scorer loop, blow up or recurse
              "huge_number": "9" * 4000, "huge_exponent": "1e999999999", "deep_nesting": "[" * 5000 + "]" * 5000}
    replies = {name: answer_block(text) for name, text in inside.items()}
    replies["empty_tags"] = "<answer></answer>"
    return replies


@dataclass
class DatasetAudit:
    dataset: str
    passed: bool = True
    failures: list[str] = field(default_factory=list)  # "seed 3 junk 'zero': 0.5 (reason)"
    skipped: list[str] = field(default_factory=list)  # seeds make() would not draw, and why
    checks: int = 0
    seconds: float = 0.0


def audit_dataset(dataset: str, seeds=SEEDS, timeout_s: float = 30.0) -> DatasetAudit:
    result = DatasetAudit(dataset)
    start = time.perf_counter()
    for seed in seeds:
        try:
            built = entries.build(dataset, seed)
        except Exception as e:  # noqa: BLE001 - the generator itself failed: report it
            result.failures.append(f"seed {seed}: the entry could not be built: {type(e).__name__}: {e}")
            continue
        skip = undrawable(dataset, built)
        if skip:  # make() never draws it
            result.skipped.append(f"seed {seed}: {skip}")
            continue
        oracle = built.oracle.strip()
        task = Task(id=f"audit-{dataset}-{seed}", domain=f"reasoning/{dataset}", prompt=built.entry["question"],
                    answer=oracle, ref=entries.ref_text(dataset, seed))
        checks = [("oracle", answer_block(oracle), 1.0)]
        checks += [(f"junk {name!r}", reply, 0.0) for name, reply in junk(built.entry["question"]).items()
                   if not _same(reply, oracle)]
        for label, reply, want in checks:
            result.checks += 1
            began = time.perf_counter()
            try:
                verdict = _with_timeout(lambda: grade(task, reply), timeout_s)
                got, why = verdict.components["outcome"], verdict.reason
            except Exception as e:  # noqa: BLE001 - an infrastructure error or a hang is a failure too
                got, why = None, f"{type(e).__name__}: {e}"
            took = time.perf_counter() - began
            if took >= timeout_s:  # a scorer's bare `except:` may have swallowed the deadline
                got, why = None, f"took {took:.1f} s"
            if got != want:
                result.failures.append(f"seed {seed} {label}: {got} ({why})")
    result.passed = not result.failures
    result.seconds = round(time.perf_counter() - start, 3)
    return result


def audit(datasets=None, seeds=SEEDS) -> dict:
    """The audit of `datasets` (every domain by default) as a JSON-able report."""
    start = time.perf_counter()
    results = [audit_dataset(d, seeds) for d in (datasets or domain_datasets())]
    return {
        "datasets": len(results),
        "seeds": list(seeds),
        "passed": [r.dataset for r in results if r.passed],
        "failed": {r.dataset: r.failures for r in results if not r.passed},
        "skipped": {r.dataset: r.skipped for r in results if r.skipped},
        "fixed": {d: {"why": f.why, "does": f.does} for d, f in FIXED.items() if d in {r.dataset for r in results}},
        "excluded": dict(EXCLUDED),
        "checks": sum(r.checks for r in results),
        "seconds": round(time.perf_counter() - start, 2),
        "slowest": sorted(([r.dataset, r.seconds] for r in results), key=lambda x: -x[1])[:5],
    }


def _same(reply: str, oracle: str) -> bool:
    """Whether a junk reply is in fact the answer (an oracle "0", "[]")."""
    text = reply.removeprefix("<answer>").removesuffix("</answer>")
    if " ".join(text.split()).lower() == " ".join(oracle.split()).lower():
        return True
    try:
        return float(text) == float(oracle)
    except ValueError:
        return False


class _Timeout(Exception):
    pass


def _with_timeout(fn, timeout_s: float):
    """fn() with a SIGALRM deadline when called from the main thread (the bench, the tests), so a
    hanging scorer is reported, not waited for; in other threads, fn() as it is."""
    if threading.current_thread() is not threading.main_thread():
        return fn()

    def expire(signum, frame):
        raise _Timeout(f"no verdict after {timeout_s:g} s")

    old = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, timeout_s)
    try:
        return fn()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def main(argv: list[str]) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m tempering.tasks.reasoning.audit",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("datasets", nargs="*", help="datasets to audit (default: every domain)")
    parser.add_argument("--seeds", type=int, default=len(SEEDS), help="seeds 0..N-1 per dataset (default %(default)s)")
    args = parser.parse_args(argv)
    report = audit(args.datasets or None, range(args.seeds))
    print(json.dumps(report, indent=1, ensure_ascii=False))
    return 0 if not report["failed"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

