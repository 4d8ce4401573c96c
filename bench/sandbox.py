"""Sandbox latency and throughput against a bare, unsandboxed fork+exec of the same jobs.

Three jobs: a trivial Python program (`python3 -c "print(1)"`), a trivial exec (`true`: the
sandbox's own cost) and a program that runs three unit tests (`python3 -m unittest`). For each: p50/p99 latency of a bare fork+exec (subprocess in a
prepared directory: no isolation, no limits, no fresh workspace), of the warm pool and of a
cold start (a new bwrap sandbox per job); the warm/bare p50 ratio; and jobs per second with
`--workers` concurrent callers, bare and warm. All measured in this one run. Prints one JSON
object. Usage: python bench/sandbox.py [--n 300] [--cold-n 30] [--workers 2]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import shutil
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

from tempering.config import SandboxConfig
from tempering.sandbox import ExecRequest, make_sandbox
from tempering.sandbox.hierarchy import detect

TESTS = b'''import unittest

class Arithmetic(unittest.TestCase):
    def test_add(self):
        self.assertEqual(1 + 1, 2)

    def test_mul(self):
        self.assertEqual(3 * 4, 12)

    def test_str(self):
        self.assertEqual("ab" * 2, "abab")
'''
PYTHON = shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin")  # what the sandbox's PATH finds
JOBS = {
    "trivial": ExecRequest(command=(PYTHON, "-c", "print(1)")),
    "trivial_exec": ExecRequest(command=(shutil.which("true", path="/usr/bin:/bin"),)),
    "three_unit_tests": ExecRequest(command=(PYTHON, "-m", "unittest", "-q", "test_arith"),
                                    files={"test_arith.py": TESTS}),
}


def percentiles(samples: list[float]) -> dict:
    s = sorted(samples)
    return {"p50_ms": round(s[len(s) // 2] * 1e3, 2), "p99_ms": round(s[min(len(s) - 1, int(len(s) * 0.99))] * 1e3, 2)}


def timed(fn, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def throughput(fn, n: int, workers: int) -> float:
    t = time.perf_counter()
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(lambda _: fn(), range(n)))
    return round(n / (time.perf_counter() - t), 1)


def bare_runner(req: ExecRequest, workdir: str):
    for name, data in req.files.items():
        with open(os.path.join(workdir, name), "wb") as f:
            f.write(data)

    def run():
        r = subprocess.run(req.command, cwd=workdir, capture_output=True)
        assert r.returncode == 0, r
    return run


def sandbox_runner(sandbox, req: ExecRequest):
    def run():
        r = sandbox.run(req)
        assert r.ok, r
    return run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=300, help="jobs per latency and throughput measurement")
    ap.add_argument("--cold-n", type=int, default=30)
    ap.add_argument("--workers", type=int, default=os.cpu_count())
    args = ap.parse_args()
    cfg = SandboxConfig(workers=args.workers)
    warm = make_sandbox(cfg)
    cold = make_sandbox(dataclasses.replace(cfg, warm_pool=False))
    workdir = tempfile.mkdtemp(prefix="tempering-bench-")
    report = {"machine": {"cpus": os.cpu_count(), "kernel": platform.release(), "cgroup_version": detect().version,
                          "python": PYTHON},
              "n": args.n, "workers": args.workers, "jobs": {}}
    try:
        for name, req in JOBS.items():
            bare, hot = bare_runner(req, workdir), sandbox_runner(warm, req)
            for fn in (bare, hot):
                timed(fn, 10)  # warm caches and the pool
            row = {"command": list(req.command)}
            row["bare"] = percentiles(timed(bare, args.n))
            row["warm"] = percentiles(timed(hot, args.n))
            row["cold"] = percentiles(timed(sandbox_runner(cold, req), args.cold_n))
            row["warm_over_bare_p50"] = round(row["warm"]["p50_ms"] / row["bare"]["p50_ms"], 2)
            row["bare"]["jobs_per_s"] = throughput(bare, args.n, args.workers)
            row["warm"]["jobs_per_s"] = throughput(hot, args.n, args.workers)
            report["jobs"][name] = row
    finally:
        warm.close()
        cold.close()
        shutil.rmtree(workdir, ignore_errors=True)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
