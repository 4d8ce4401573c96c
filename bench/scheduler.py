"""Two-level scheduling against FIFO and uniform random, in one simulated cluster. No model.

A discrete-event simulation in virtual time (one process, a heap of job ends) drives `--domains`
synthetic generator domains (registered with `tasks.registry.register`, `sandbox=True`) on
`--nodes` sandbox nodes of `--slots` slots and `--replicas` engine replicas. Drawn from `--seed`:
each domain's weight (1, 2, 4 or 16), priority (10% of domains 2, "high"; 20% 1; the rest 0),
mean job duration (lognormal, median 2 s, 0.05-60 s) and tokens per sample (lognormal, median
300). A group is `--samples` jobs submitted together to the node with the fewest queued jobs; a
job's duration is Pareto (`--alpha`) with its domain's mean, capped at `--cap` x that mean, from
the domain's own random stream (every policy sees the same durations for its i-th group). The
slots are saturated: after every event, batches of `--groups-per-batch` groups are admitted while
fewer than `--queue-factor` x slots jobs are queued in all (the same rule for every policy).
- `tempering`: `GlobalScheduler` picks each group's domain (`admit` one batch at a time,
  `complete`, `consumed`, then `node_policy`, as the rollout service calls them; fixed weights:
  `adaptive`, `curriculum` off); each node's `LocalScheduler` orders its jobs under that policy
  (`submit`, `next`, `finish`, and `report` after each group, as the rollout worker calls them).
- `fifo`: each group's domain drawn by weight (as the old pool drew: per group, so domains whose
  groups are expensive get more than their share); a FIFO queue per node.
- `random`: domains drawn uniformly; a node starts a uniformly random queued job.
Per policy (shares, utilisation and waits over the window after the first `--warmup`):
- `decisions_per_s`: groups ordered + jobs started, per second of wall time inside scheduler calls
  only (perf_counter around each call; `scheduler_s_by_call` splits it); `sim_wall_s` is the
  whole simulation. Wall time includes waits for a CPU on a shared machine: `cpu_share` is CPU /
  wall over the simulation, `decisions_per_cpu_s` the rate divided by it.
- `max_share_error`: percentage points, max over domains of |achieved - target|; target = weight
  / sum of weights; achieved = the domain's dominant share, as `GlobalScheduler` defines it: the
  larger of its slot-seconds / slots and its tokens / the replicas' tokens per second, in the
  window (jobs pro rata to their overlap), over all domains' sum. Tokens take no time here (no
  engine), so only slots constrain (`token_dominant_domains`: domains whose larger is tokens).
  200 targets are each under 5 points: `max_share_error_rel` (percent of the target) and
  `share_error_l1` (half the L1 distance, points) say more.
- `utilization`: busy slot-seconds / (slots x window), percent.
- waits (virtual seconds, submit to start) of jobs started in the window: p50/p99 of priority-2
  domains' jobs (`high_priority_*`) and p50/p99/max of all.
Top level: tempering's figures, `high_priority_p99_vs_fifo` (fifo's p99 / tempering's) and
`_vs_random`, and the issue's targets. Prints one JSON object.
Usage: python bench/scheduler.py [--domains 200] [--seconds 20000] [--seed 0] [--nodes 4] [--slots 16]
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import json
import math
import os
import random
import time
from collections import Counter, defaultdict, deque
from dataclasses import dataclass

from tempering.config import SchedulerConfig, TasksConfig
from tempering.records import Task
from tempering.scheduler.global_ import GlobalScheduler
from tempering.scheduler.orders import GroupReport
from tempering.scheduler.local import Job, LocalScheduler
from tempering.tasks.answers import exact_answer
from tempering.tasks.domain import Domain
from tempering.tasks.registry import register

FAMILY = "bench-sched"


@dataclass(frozen=True)
class Profile:
    name: str
    weight: int
    priority: int
    mean_s: float  # mean job duration
    tokens: float  # mean generated tokens per sample


def profiles(n: int, seed: int) -> list[Profile]:
    rng = random.Random(seed)
    prio = ([2] * round(0.1 * n) + [1] * round(0.2 * n) + [0] * n)[:n]
    rng.shuffle(prio)
    return [Profile(f"{FAMILY}/d{i:03d}", rng.choices([1, 2, 4, 16], [0.5, 0.3, 0.15, 0.05])[0], prio[i],
                    min(60.0, max(0.05, rng.lognormvariate(math.log(2.0), 1.0))),
                    rng.lognormvariate(math.log(300.0), 0.6)) for i in range(n)]


def register_domains(profs: list[Profile]) -> None:
    def maker(name):
        return lambda rng: Task("", name, f"{name} #{rng.getrandbits(40)}", answer="0")
    register([Domain(p.name, "scheduler benchmark", exact_answer, make=maker(p.name), sandbox=True)
              for p in profs], "bench/scheduler.py")


class SimJob:
    __slots__ = ("group", "domain", "high", "duration", "tokens", "node", "submitted", "started", "handle")

    def __init__(self, group, domain, high, duration, tokens, node, submitted):
        self.group, self.domain, self.high, self.duration, self.tokens = group, domain, high, duration, tokens
        self.node, self.submitted, self.started, self.handle = node, submitted, 0.0, None


class SimGroup:
    __slots__ = ("key", "node", "tokens", "pending", "sandbox_s", "outcomes")


# -- policies: each call into a scheduler is timed into `took` ---------------------------------------------
class Policy:
    def __init__(self):
        self.took: Counter = Counter()  # call -> seconds inside it

    def tick(self, call: str, t0: float) -> None:
        self.took[call] += time.perf_counter() - t0


class Tempering(Policy):
    def __init__(self, profs: list[Profile], args):
        super().__init__()
        cfg = SchedulerConfig(priorities={p.name: p.priority for p in profs if p.priority}, adaptive=False,
                              curriculum=False, horizon=args.horizon, aging_s=args.aging_s)
        tasks = TasksConfig(weights={p.name: float(p.weight) for p in profs}, seed=args.seed)
        tokens = sum(p.tokens for p in profs) / len(profs) * args.samples
        # max_staleness 0 and an unbounded buffer: `admit(next_batch)` admits exactly one batch
        self.gs = GlobalScheduler(tasks, cfg, args.groups_per_batch, 0, 1 << 30, tokens_per_group=tokens,
                                  group_rate=math.inf)  # no trainer here: groups cost only their jobs
        for r in range(args.replicas):
            self.gs.add_replica(f"engine-{r}", args.tokens_per_s)
        for n in range(args.nodes):
            self.gs.add_node(f"node-{n}", args.slots)
        self.nodes = [LocalScheduler(args.slots, aging_s=cfg.aging_s) for _ in range(args.nodes)]
        self.policy, self.done = None, Counter()
        self.refresh()

    def refresh(self) -> None:
        t = time.perf_counter()
        policy = self.gs.node_policy()
        if policy != self.policy:
            self.policy = policy
            for node in self.nodes:
                node.set_quotas(policy.quotas)
        self.tick("node_policy", t)

    def orders(self) -> list[tuple[tuple[int, int], str]]:
        t = time.perf_counter()
        orders = self.gs.admit(self.gs.admission.next_batch)
        self.tick("admit", t)
        return [((o.id, o.batch), o.task.domain) for o in orders]

    def complete(self, g: SimGroup) -> None:
        t = time.perf_counter()
        self.nodes[g.node].report()
        self.tick("report", t)
        order, batch = g.key
        t = time.perf_counter()
        self.gs.complete(GroupReport(order, g.tokens, g.sandbox_s, g.outcomes, g.outcomes))
        self.done[batch] += 1
        finished = self.done[batch] == self.gs.admission.groups_per_batch
        if finished:
            del self.done[batch]
            self.gs.consumed(batch)
        self.tick("complete", t)
        if finished:
            self.refresh()

    def submit(self, job: SimJob, now: float) -> None:
        t = time.perf_counter()
        job.handle = self.nodes[job.node].submit(
            Job(job.domain, self.policy.priorities.get(job.domain, 0), payload=job), now)
        self.tick("submit", t)

    def next(self, node: int, now: float) -> SimJob:
        t = time.perf_counter()
        job = self.nodes[node].next(now)
        self.tick("next", t)
        return job.payload

    def finish(self, job: SimJob, now: float) -> None:
        t = time.perf_counter()
        self.nodes[job.node].finish(job.handle, now)
        self.tick("finish", t)


class Baseline(Policy):
    """`fifo`: domains drawn by weight per group, a FIFO queue per node. `random` (uniform): domains
    drawn uniformly, each node starts a uniformly random queued job."""

    def __init__(self, profs: list[Profile], args, uniform: bool = False):
        super().__init__()
        self.rng, self.uniform = random.Random(args.seed + 1), uniform
        self.names = [p.name for p in profs]
        self.cum = list(itertools.accumulate(1 if uniform else p.weight for p in profs))
        self.k, self.ids = args.groups_per_batch, itertools.count()
        self.queues = [deque() for _ in range(args.nodes)]

    def complete(self, g: SimGroup) -> None:
        pass

    def finish(self, job: SimJob, now: float) -> None:
        pass

    def orders(self):
        t = time.perf_counter()
        names = self.rng.choices(self.names, cum_weights=self.cum, k=self.k)
        self.tick("admit", t)
        return [((next(self.ids), 0), n) for n in names]

    def submit(self, job: SimJob, now: float) -> None:
        t = time.perf_counter()
        self.queues[job.node].append(job)
        self.tick("submit", t)

    def next(self, node: int, now: float) -> SimJob:
        t = time.perf_counter()
        q = self.queues[node]
        if self.uniform:
            q.rotate(-self.rng.randrange(len(q)))
        job = q.popleft()
        self.tick("next", t)
        return job


POLICIES = {"tempering": Tempering, "fifo": Baseline, "random": lambda p, a: Baseline(p, a, uniform=True)}


# -- the simulation ---------------------------------------------------------------------------------------
class Simulation:
    def __init__(self, policy: Policy, profs: list[Profile], args):
        self.policy, self.args = policy, args
        self.prof = {p.name: p for p in profs}
        self.streams = {p.name: random.Random(f"{args.seed}/{p.name}") for p in profs}
        self.events: list = []  # (end, seq, job) of the running jobs
        self.seq = itertools.count()
        self.queued, self.running = [0] * args.nodes, [0] * args.nodes
        self.bound = args.queue_factor * args.slots * args.nodes
        self.warm, self.end = args.warmup * args.seconds, args.seconds
        self.slot_s, self.tokens = defaultdict(float), defaultdict(float)  # per domain, in the window
        self.waits, self.high_waits = [], []
        self.picks = self.starts = self.ends = 0

    def run(self) -> None:
        self.admit(0.0)
        while self.events and self.events[0][0] <= self.end:
            now, _, job = heapq.heappop(self.events)
            self.job_ended(job, now)
            self.admit(now)
        for _, _, job in self.events:  # still running at the end: their part of the window
            self.account(job, self.end)

    def admit(self, now: float) -> None:
        while sum(self.queued) < self.bound:
            for key, domain in self.policy.orders():
                self.picks += 1
                self.start_group(key, domain, now)

    def start_group(self, key, domain: str, now: float) -> None:
        p, rng, a = self.prof[domain], self.streams[domain], self.args
        g = SimGroup()
        g.key, g.pending, g.sandbox_s = key, a.samples, 0.0
        g.tokens = round(a.samples * p.tokens * rng.uniform(0.5, 1.5))
        g.outcomes = tuple(float(rng.random() < 0.5) for _ in range(a.samples))
        g.node = node = min(range(a.nodes), key=self.queued.__getitem__)
        scale = p.mean_s * (a.alpha - 1) / a.alpha  # a Pareto variate's mean is alpha / (alpha - 1)
        for _ in range(a.samples):
            seconds = min(a.cap * p.mean_s, scale * rng.paretovariate(a.alpha))
            self.policy.submit(SimJob(g, domain, p.priority == 2, seconds, g.tokens / a.samples, node, now), now)
        self.queued[node] += a.samples
        self.dispatch(node, now)

    def dispatch(self, node: int, now: float) -> None:
        while self.running[node] < self.args.slots and self.queued[node]:
            job = self.policy.next(node, now)
            self.queued[node] -= 1
            self.running[node] += 1
            self.starts += 1
            job.started = now
            if now >= self.warm:
                self.waits.append(now - job.submitted)
                if job.high:
                    self.high_waits.append(now - job.submitted)
            heapq.heappush(self.events, (now + job.duration, next(self.seq), job))

    def job_ended(self, job: SimJob, now: float) -> None:
        self.ends += 1
        self.running[job.node] -= 1
        self.policy.finish(job, now)
        self.account(job, now)
        g = job.group
        g.sandbox_s += job.duration
        g.pending -= 1
        if not g.pending:
            self.policy.complete(g)
        self.dispatch(job.node, now)

    def account(self, job: SimJob, until: float) -> None:
        overlap = min(until, self.end) - max(job.started, self.warm)
        if overlap > 0:
            self.slot_s[job.domain] += overlap
            self.tokens[job.domain] += job.tokens * overlap / job.duration


def percentile(xs: list[float], q: float) -> float | None:
    s = sorted(xs)
    return round(s[min(len(s) - 1, int(q * len(s)))], 3) if s else None


def shares(sim: Simulation, profs: list[Profile], args) -> dict:
    """Each domain's achieved dominant share over the window against its weight's share."""
    slots, tokens_per_s = args.slots * args.nodes, args.tokens_per_s * args.replicas
    dominant = {p.name: max(sim.slot_s[p.name] / slots, sim.tokens[p.name] / tokens_per_s) for p in profs}
    total_d, total_w = sum(dominant.values()), sum(p.weight for p in profs)
    target = {p.name: p.weight / total_w for p in profs}
    err = {n: dominant[n] / total_d - target[n] for n in target}
    worst = max(err, key=lambda n: abs(err[n]))
    return {"max_share_error": round(100 * abs(err[worst]), 3),
            "worst_domain": {"name": worst, "target": round(100 * target[worst], 3),
                             "achieved": round(100 * dominant[worst] / total_d, 3)},
            "max_share_error_rel": round(100 * max(abs(err[n]) / target[n] for n in target), 1),
            "share_error_l1": round(50 * sum(abs(e) for e in err.values()), 2),
            "token_dominant_domains": sum(sim.tokens[n] / tokens_per_s > sim.slot_s[n] / slots for n in target)}


def measure(name: str, profs: list[Profile], args) -> dict:
    policy = POLICIES[name](profs, args)
    sim = Simulation(policy, profs, args)
    wall, cpu = time.perf_counter(), time.process_time()
    sim.run()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    spent = sum(policy.took.values())
    rate = (sim.picks + sim.starts) / spent
    return {
        "decisions": sim.picks + sim.starts, "decisions_per_s": round(rate),
        "cpu_share": round(cpu / wall, 2), "decisions_per_cpu_s": round(rate * wall / cpu),
        "scheduler_s": round(spent, 3), "scheduler_s_by_call": {c: round(s, 3) for c, s in policy.took.items()},
        "sim_wall_s": round(wall, 2), "groups": sim.picks, "jobs_ended": sim.ends,
        "utilization": round(100 * sum(sim.slot_s.values()) / (args.slots * args.nodes * (sim.end - sim.warm)), 2),
        **shares(sim, profs, args),
        "high_priority_wait_p50_s": percentile(sim.high_waits, 0.5),
        "high_priority_wait_p99_s": percentile(sim.high_waits, 0.99),
        "wait_p50_s": percentile(sim.waits, 0.5), "wait_p99_s": percentile(sim.waits, 0.99),
        "wait_max_s": round(max(sim.waits, default=0.0), 1),
        "high_priority_jobs": len(sim.high_waits), "jobs_started": len(sim.waits)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--domains", type=int, default=200)
    ap.add_argument("--seconds", type=float, default=20000.0, help="simulated seconds per policy")
    ap.add_argument("--warmup", type=float, default=0.2, help="fraction of the time left out of the window")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--slots", type=int, default=16, help="sandbox slots per node")
    ap.add_argument("--replicas", type=int, default=2)
    ap.add_argument("--tokens-per-s", type=float, default=20000.0, help="per replica")
    ap.add_argument("--samples", type=int, default=8, help="jobs per group")
    ap.add_argument("--groups-per-batch", type=int, default=4)
    ap.add_argument("--queue-factor", type=float, default=2.0, help="admit while queued jobs < this x slots")
    ap.add_argument("--alpha", type=float, default=1.7, help="Pareto shape of job durations")
    ap.add_argument("--cap", type=float, default=20.0, help="longest job, in multiples of its domain's mean")
    ap.add_argument("--horizon", type=int, default=SchedulerConfig.horizon, help="scheduler.horizon (groups)")
    ap.add_argument("--aging-s", type=float, default=SchedulerConfig.aging_s, help="scheduler.aging_s")
    ap.add_argument("--policies", default="tempering,fifo,random")
    args = ap.parse_args()
    profs = profiles(args.domains, args.seed)
    register_domains(profs)
    report = {"config": {**vars(args), "cpus": os.cpu_count(),
                         "high_priority_domains": sum(p.priority == 2 for p in profs)}}
    load = round(os.getloadavg()[0], 2)
    report["policies"] = {name: measure(name, profs, args) for name in args.policies.split(",")}
    report["config"]["loadavg_1m"] = {"start": load, "end": round(os.getloadavg()[0], 2)}
    ours = report["policies"].get("tempering", {})
    for key in ("decisions_per_s", "decisions_per_cpu_s", "max_share_error", "utilization",
                "high_priority_wait_p50_s", "high_priority_wait_p99_s"):
        report[key] = ours.get(key)
    for base, other in report["policies"].items():
        if base != "tempering" and ours.get("high_priority_wait_p99_s"):
            report[f"high_priority_p99_vs_{base}"] = round(
                other["high_priority_wait_p99_s"] / ours["high_priority_wait_p99_s"], 2)
    report["targets_met"] = {
        "decisions_per_s >= 50000": (report["decisions_per_s"] or 0) >= 50000,
        "max_share_error <= 5": report["max_share_error"] is not None and report["max_share_error"] <= 5,
        "high_priority_p99_vs_fifo >= 5": report.get("high_priority_p99_vs_fifo", 0) >= 5,
        "utilization >= 95": (report["utilization"] or 0) >= 95}
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
