"""Sandbox latency and throughput against a bare, unsandboxed fork+exec of the same jobs.

Three jobs: a trivial Python program (`python3 -c "print(1)"`), a trivial exec (`true`: the
sandbox's own cost) and a program that runs three unit tests (`python3 -m unittest`). For
each: p50/p99 latency of a bare fork+exec (subprocess in a prepared directory: no isolation,
no limits, no fresh workspace), of the warm pool (`warm`) and of a cold start (a new bwrap
sandbox per job); the warm/bare p50 ratio; and, with `--workers` concurrent callers, jobs per
second and CPU time per job (this process and its children, plus every process of the
sandbox's cgroup tree), from which `capacity` is the jobs per second the machine's CPUs would
sustain if nothing else ran: on a shared machine the wall-clock rate moves with other people's
load, the CPU time much less. All measured in this one run, bare and warm interleaved in
rounds so that load from other processes spreads over both. Prints one JSON object.
Usage: python bench/sandbox.py [--n 300] [--cold-n 30] [--workers 2] [--rounds 3]
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


def throughput(runner, n: int, workers: int) -> tuple[int, float, float]:
    """(jobs, seconds, CPU seconds) for n jobs from `workers` concurrent callers."""
    fn, cpu = runner
    t, c = time.perf_counter(), cpu()
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(lambda _: fn(), range(n)))
    return n, time.perf_counter() - t, cpu() - c


def host_cpu() -> float:
    """CPU seconds of this process (all threads) and of its children that have ended."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def interleaved(runners: dict, measure, rounds: int) -> dict:
    """measure(fn) for every runner, in `rounds` alternating passes: {name: [pass results]}."""
    out = {name: [] for name in runners}
    for _ in range(rounds):
        for name, fn in runners.items():
            out[name].append(measure(fn))
    return out


def bare_runner(req: ExecRequest, workdir: str):
    """(run one job, CPU seconds so far) for a bare fork+exec."""
    for name, data in req.files.items():
        with open(os.path.join(workdir, name), "wb") as f:
            f.write(data)

    def run():
        r = subprocess.run(req.command, cwd=workdir, capture_output=True)
        assert r.returncode == 0, r
    return run, host_cpu


def sandbox_runner(sandbox, req: ExecRequest):
    """(run one job, CPU seconds so far) for a sandbox: ours plus its cgroup tree's."""
    def run():
        r = sandbox.run(req)
        assert r.ok, r
    return run, lambda: host_cpu() + sandbox._tree.cpu_s()


def measure_job(req: ExecRequest, sandboxes: dict, workdir: str, args) -> dict:
    runners = {"bare": bare_runner(req, workdir), **{k: sandbox_runner(sb, req) for k, sb in sandboxes.items()
                                                     if k != "cold"}}
    for fn, _ in runners.values():
        timed(fn, 10)  # warm caches and the pools
    per_round = max(1, args.n // args.rounds)
    latency = interleaved(runners, lambda r: timed(r[0], per_round), args.rounds)
    rates = interleaved(runners, lambda r: throughput(r, per_round, args.workers), args.rounds)
    row = {"command": list(req.command)}
    for name in runners:
        row[name] = percentiles([x for run in latency[name] for x in run])
        jobs, seconds, cpu = map(sum, zip(*rates[name]))
        row[name]["jobs_per_s"] = round(jobs / seconds, 1)
        row[name]["jobs_per_s_rounds"] = [round(j / s, 1) for j, s, _ in rates[name]]
        row[name]["cpu_ms_per_job"] = round(cpu / jobs * 1e3, 2)
        row[name]["capacity_jobs_per_s"] = round(os.cpu_count() * jobs / cpu, 1)
    row["cold"] = percentiles(timed(sandbox_runner(sandboxes["cold"], req)[0], args.cold_n))
    row["warm_over_bare_p50"] = round(row["warm"]["p50_ms"] / row["bare"]["p50_ms"], 2)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=300, help="jobs per latency and throughput measurement")
    ap.add_argument("--cold-n", type=int, default=30)
    ap.add_argument("--workers", type=int, default=os.cpu_count())
    ap.add_argument("--rounds", type=int, default=3, help="alternating passes over bare and warm")
    args = ap.parse_args()
    cfg = SandboxConfig(workers=args.workers)
    sandboxes = {"warm": make_sandbox(cfg), "cold": make_sandbox(dataclasses.replace(cfg, warm_pool=False))}
    workdir = tempfile.mkdtemp(prefix="tempering-bench-")
    report = {"machine": {"cpus": os.cpu_count(), "kernel": platform.release(), "cgroup_version": detect().version,
                          "python": PYTHON},
              "n": args.n, "workers": args.workers, "rounds": args.rounds,
              "loadavg_1m": {"start": round(os.getloadavg()[0], 2)}, "jobs": {}}
    try:
        for name, req in JOBS.items():
            report["jobs"][name] = measure_job(req, sandboxes, workdir, args)
    finally:
        for sb in sandboxes.values():
            sb.close()
        shutil.rmtree(workdir, ignore_errors=True)
    report["loadavg_1m"]["end"] = round(os.getloadavg()[0], 2)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
