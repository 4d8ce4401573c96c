"""`LocalScheduler`: the order in which one node's sandbox jobs get its slots.

When a slot (and the memory it reserves) is free, the next job is chosen in two tiers: domains
whose recent slot usage is within the quota the global scheduler handed down first (a quota above
zero counts as at least one slot), over-quota domains only when no other job waits, so no slot
idles. Within a tier the lowest key goes: arrival time, earlier by `aging_s` per priority level,
later by the job's expected cost (capped at `aging_s`). The key is fixed at arrival, so a job is
passed only by jobs that arrived at most `aging_s` x (priority difference + 1) after it: nothing
starves. Usage decays with time constant `horizon_s`. Plain bookkeeping with an explicit clock:
no threads, no sandbox (`scheduler.node` runs real jobs through it), nothing of the global
scheduler."""

from __future__ import annotations

import heapq
import itertools
import math
from collections import defaultdict, deque
from dataclasses import dataclass, field
from typing import Mapping

_LOG_RENORM = math.log(1e100)  # log of the growth factor at which every charge is scaled back down


@dataclass(eq=False)
class Job:
    domain: str
    priority: int = 0
    memory_mb: int = 0  # what it reserves of the node's memory while it runs; 0: nothing
    payload: object = None  # the caller's (the node's waiting thread, the benchmark's job)
    # set by the scheduler
    id: int = -1
    submitted: float = 0.0
    started: float | None = None
    expected_s: float = 0.0
    key: float = 0.0
    reserved_mb: int = 0  # the memory it holds while it runs (given back by `finish`)


@dataclass(frozen=True)
class NodeStats:
    """What a node reports: its queue now, and the waits of the jobs started since the last
    report (seconds from arrival to a slot), per domain and overall."""

    slots: int
    running: int
    queued: int
    queued_by_domain: dict[str, int]
    waits: dict[str, list[float]]  # domain -> waits of the jobs started since the last report
    busy_s: float  # slot-seconds of the jobs that finished since the last report

    @property
    def all_waits(self) -> list[float]:
        return [w for ws in self.waits.values() for w in ws]


@dataclass
class _Domain:
    queue: list = field(default_factory=list)  # heap of (key, id, job)
    usage: float = 0.0  # decayed slot-seconds, in growing units (see LocalScheduler._grow)
    share: float | None = None  # of the node's slots; None: no quota
    stamp: int = 0  # bumps whenever its entries in the tier heaps go stale
    expected_s: float | None = None
    running: int = 0


class LocalScheduler:
    def __init__(self, slots: int, memory_mb: int = 0, aging_s: float = 30.0, horizon_s: float = 600.0,
                 default_s: float = 1.0):
        if slots < 1:
            raise ValueError(f"a node needs at least one slot, got {slots}")
        self.slots, self.memory_mb = slots, memory_mb
        self.aging_s, self.horizon_s, self.default_s = aging_s, horizon_s, default_s
        self.running = 0
        self.memory_used = 0
        self._domains: dict[str, _Domain] = defaultdict(_Domain)
        self._under: list = []  # (head key, stamp, domain): domains within quota with jobs waiting
        self._over: list = []  # the same for domains over quota
        self._thresholds: list = []  # (usage / share, stamp, domain): over-quota domains, by when they are not
        self._total = 0.0
        self._t0: float | None = None
        self._log_scale = 0.0  # log of the factor every charge was scaled down by
        self._ids = itertools.count()
        self._queued = 0
        self._waits: dict[str, list[float]] = defaultdict(list)
        self._busy = 0.0
        self._mean_s = deque(maxlen=64)  # recent durations of all domains: the guess for a new one

    # -- what the global scheduler hands down -------------------------------------------------------
    def set_quotas(self, shares: Mapping[str, float]) -> None:
        """Each named domain's share of the slots (0-1); domains not named have no quota."""
        for name, share in shares.items():
            if not (0 <= share <= 1) or math.isnan(share):
                raise ValueError(f"slot quota of {name}: expected a share in [0, 1], got {share!r}")
        for name in set(self._domains) | set(shares):
            self._domains[name].share = shares.get(name)
            self._place(name)

    def resize(self, slots: int, memory_mb: int | None = None) -> None:
        """A node's capacity changed; running jobs keep their slots until they finish."""
        if slots < 1:
            raise ValueError(f"a node needs at least one slot, got {slots}")
        self.slots = slots
        if memory_mb is not None:
            self.memory_mb = memory_mb
        for name in self._domains:  # a slot is now another share of the node: quotas floor anew
            self._place(name)

    # -- jobs ---------------------------------------------------------------------------------------------
    def submit(self, job: Job, now: float) -> Job:
        d = self._domains[job.domain]
        job.id, job.submitted, job.started = next(self._ids), now, None
        job.expected_s = d.expected_s if d.expected_s is not None else self._guess()
        cost = job.expected_s * max(1.0, job.memory_mb / self._slot_mb()) if self.memory_mb else job.expected_s
        job.key = now - self.aging_s * job.priority + min(cost, self.aging_s)
        heapq.heappush(d.queue, (job.key, job.id, job))
        self._queued += 1
        if d.queue[0][2] is job:
            self._place(job.domain)
        return job

    def cancel(self, job: Job) -> bool:
        """Take a job that has not started out of its queue (its caller gave up)."""
        d = self._domains[job.domain]
        for i, entry in enumerate(d.queue):
            if entry[2] is job:
                d.queue.pop(i)
                heapq.heapify(d.queue)
                self._queued -= 1
                self._place(job.domain)
                return True
        return False

    def next(self, now: float) -> Job | None:
        """The job that starts now, if a slot is free and the job chosen fits the free memory;
        it holds its slot until `finish`."""
        if self.running >= self.slots or not self._queued:
            return None
        self._promote()
        picked = self._head(self._under) or self._head(self._over)
        if picked is None:
            return None
        d = self._domains[picked]
        job = d.queue[0][2]
        need = min(job.memory_mb, self.memory_mb)
        if self.memory_mb and self.memory_used + need > self.memory_mb:
            return None  # it waits for memory; nothing passes it (no backfilling)
        heapq.heappop(d.queue)
        self._queued -= 1
        job.started = now
        self.running += 1
        d.running += 1
        self.memory_used += need
        job.reserved_mb = need
        self._waits[job.domain].append(now - job.submitted)
        self._charge(job.domain, job.expected_s, now)
        self._place(picked)
        return job

    def finish(self, job: Job, now: float) -> None:
        """`job` ended: its slot is free; its duration teaches the domain's expected duration and
        corrects the usage charged for it."""
        assert job.started is not None, "finish of a job that never started"
        d = self._domains[job.domain]
        seconds = max(now - job.started, 0.0)
        self.running -= 1
        d.running -= 1
        self.memory_used -= job.reserved_mb
        self._busy += seconds
        self._charge(job.domain, seconds - job.expected_s, now)
        d.expected_s = seconds if d.expected_s is None else 0.8 * d.expected_s + 0.2 * seconds
        self._mean_s.append(seconds)
        self._place(job.domain)

    # -- reports ----------------------------------------------------------------------------------------
    def expected_s(self, domain: str) -> float:
        d = self._domains.get(domain)
        return d.expected_s if d is not None and d.expected_s is not None else self._guess()

    def report(self) -> NodeStats:
        """The queue now and the waits since the last report (which this resets)."""
        by_domain = {n: len(d.queue) for n, d in self._domains.items() if d.queue}
        stats = NodeStats(self.slots, self.running, self._queued, by_domain, dict(self._waits), self._busy)
        self._waits, self._busy = defaultdict(list), 0.0
        return stats

    # -- internals -----------------------------------------------------------------------------------------
    def _guess(self) -> float:
        return sum(self._mean_s) / len(self._mean_s) if self._mean_s else self.default_s

    def _slot_mb(self) -> float:
        return self.memory_mb / self.slots

    def _charge(self, name: str, seconds: float, now: float) -> None:
        if self._t0 is None:
            self._t0 = now
        x = (now - self._t0) / self.horizon_s - self._log_scale  # log of the growth factor now
        if x > _LOG_RENORM:  # rescale every charge at once; the order of ratios is unchanged
            self._log_scale += x
            f = math.exp(-x)  # (in log terms, so that no factor overflows, even after a long idle spell)
            for d in self._domains.values():
                d.usage *= f
            self._total *= f
            self._thresholds = [(k * f, s, n) for k, s, n in self._thresholds]
            x = 0.0
        g = math.exp(x)
        d = self._domains[name]
        amount = max(seconds * g, -d.usage)
        d.usage += amount
        self._total += amount

    def _place(self, name: str) -> None:
        """Re-file a domain in the tier its usage puts it in (its old entries go stale)."""
        d = self._domains[name]
        d.stamp += 1
        if not d.queue:
            return
        head = d.queue[0][0]
        share = d.share if not d.share else max(d.share, 1 / self.slots)  # at least one slot (see above)
        # the same comparison as _promote's (usage / share against the total), so a domain it
        # promotes is filed within quota; a zero share is never within quota
        if share is None or (share > 0 and d.usage / share <= self._total):
            heapq.heappush(self._under, (head, d.stamp, name))
        else:
            heapq.heappush(self._over, (head, d.stamp, name))
            if share > 0:  # a zero share never comes back within quota
                heapq.heappush(self._thresholds, (d.usage / share, d.stamp, name))

    def _promote(self) -> None:
        """Domains whose quota the grown total now covers move to the first tier."""
        while self._thresholds and self._thresholds[0][0] <= self._total:
            _, stamp, name = heapq.heappop(self._thresholds)
            if self._domains[name].stamp == stamp:
                self._place(name)

    def _head(self, tier: list) -> str | None:
        while tier:
            _, stamp, name = tier[0]
            if self._domains[name].stamp == stamp:
                return name
            heapq.heappop(tier)
        return None
