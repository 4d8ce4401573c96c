"""`ElasticPolicy`: how many rollout replicas a run wants, from what each trainer step saw.

One `Observation` per batch the trainer took: how long it waited for that batch, how long it
worked between batches (its step and the weight publish), and the seconds the live replicas'
engines generated meanwhile. Two fractions of that cycle decide:

- the trainer's wait fraction, wait / (wait + work): at or above `up_wait` the trainer waits for
  batches (rollout is the bottleneck): one replica more helps;
- the replicas' idle fraction, 1 - generate / (replicas x cycle), while the trainer's wait
  fraction is below `up_wait`: at or above `down_idle` the trainer is the bottleneck and the
  replicas' engines sit idle (admission holds back while complete batches wait): one fewer does
  the same work.

Hysteresis: a direction acts only after `patience` consecutive observations agree, and after an
action the next `cooldown` observations are ignored (they show the change settling). While a
replica is still starting or draining (`changing`) nothing is decided. Bounds: never above
`max_replicas`, never below `min_replicas`. Each `Decision` carries its reason in words and as a
code for the metrics. It is arithmetic only: it starts, drains and measures nothing
(`rollout.service` does).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Action = Literal["add", "remove", "hold"]
# a decision's reason as a number for the metrics (metrics.jsonl holds numbers only)
REASONS = ("steady", "trainer_waits", "trainer_bottleneck", "streak", "cooldown", "changing", "at_max", "at_min")


@dataclass(frozen=True)
class Observation:
    wait_s: float  # the trainer's wait for this batch
    work_s: float  # the trainer's time from taking the previous batch to asking for this one
    generate_s: float  # engine seconds the replicas generated meanwhile, summed over them
    replicas: int  # live replicas taking groups (none starting or draining counted)
    changing: int = 0  # replicas still starting or draining

    @property
    def wait_fraction(self) -> float:
        cycle = self.wait_s + self.work_s
        return self.wait_s / cycle if cycle > 0 else 0.0

    @property
    def idle_fraction(self) -> float:
        capacity = self.replicas * (self.wait_s + self.work_s)
        return min(1.0, max(0.0, 1.0 - self.generate_s / capacity)) if capacity > 0 else 0.0


@dataclass(frozen=True)
class Decision:
    action: Action
    reason: str  # one of REASONS
    detail: str  # the reason in words, with the figures that led to it
    replicas: int  # how many replicas the run wants after it
    streak: int  # consecutive observations that agreed on the direction so far

    def record(self, obs: Observation) -> dict[str, float]:
        """The decision as numbers, for a step's metrics row (under "elastic/")."""
        return {"replicas": obs.replicas, "changing": obs.changing, "target": self.replicas, "wait_fraction": round(obs.wait_fraction, 4),
                "idle_fraction": round(obs.idle_fraction, 4), "streak": self.streak,
                "decision": {"add": 1, "remove": -1, "hold": 0}[self.action], "reason": REASONS.index(self.reason)}


@dataclass
class ElasticPolicy:
    min_replicas: int
    max_replicas: int
    up_wait: float  # trainer wait fraction at or above which a replica is added
    down_idle: float  # replicas' idle fraction at or above which one is removed (trainer not waiting)
    patience: int  # consecutive observations before acting
    cooldown: int  # observations ignored after acting
    _direction: Action = "hold"
    _streak: int = 0
    _cooling: int = 0

    def __post_init__(self) -> None:
        if not 1 <= self.min_replicas <= self.max_replicas:
            raise ValueError(f"elastic replicas: need 1 <= min ({self.min_replicas}) <= max ({self.max_replicas})")
        if self.patience < 1 or self.cooldown < 0:
            raise ValueError(f"elastic replicas: patience >= 1 and cooldown >= 0, got {self.patience}, {self.cooldown}")

    def observe(self, obs: Observation) -> Decision:
        """The decision after one more observation (the policy remembers the streak)."""
        if self._cooling:
            self._cooling -= 1
            return self._hold(obs, "cooldown", f"{self._cooling + 1} more observation(s) of cooldown after a change")
        if obs.changing:
            return self._hold(obs, "changing", f"{obs.changing} replica(s) still starting or draining")
        wait, idle = obs.wait_fraction, obs.idle_fraction
        figures = f"trainer waited {wait:.0%} of its cycle, replicas idle {idle:.0%}"
        if wait >= self.up_wait:
            direction, reason, bound = "add", "trainer_waits", obs.replicas >= self.max_replicas
        elif idle >= self.down_idle:
            direction, reason, bound = "remove", "trainer_bottleneck", obs.replicas <= self.min_replicas
        else:
            self._direction, self._streak = "hold", 0
            return Decision("hold", "steady", figures, obs.replicas, 0)
        if bound:
            self._direction, self._streak = "hold", 0
            limit = "at_max" if direction == "add" else "at_min"
            return Decision("hold", limit, f"{figures}; {obs.replicas} replicas is the bound", obs.replicas, 0)
        self._streak = self._streak + 1 if self._direction == direction else 1
        self._direction = direction
        if self._streak < self.patience:
            return Decision("hold", "streak", f"{figures}; {reason} {self._streak} of {self.patience} in a row",
                            obs.replicas, self._streak)
        streak, self._streak, self._direction, self._cooling = self._streak, 0, "hold", self.cooldown
        target = obs.replicas + (1 if direction == "add" else -1)
        return Decision(direction, reason, f"{figures}; {reason} {streak} times in a row", target, streak)

    def _hold(self, obs: Observation, reason: str, detail: str) -> Decision:
        self._direction, self._streak = "hold", 0
        return Decision("hold", reason, detail, obs.replicas, 0)
