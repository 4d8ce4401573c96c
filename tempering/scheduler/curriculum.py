"""`Curriculum`: what each domain's recent groups say, and the weight and level that follow.

Per domain it keeps a window of its last `window` groups: each group's pass rate (mean outcome)
and whether its rewards differed (a group whose samples all score the same teaches GRPO
nothing). With `adaptive`, a domain's weight is its configured weight times the fraction of its
recent groups that carried such a signal, never below `floor` of the configured weight, so a
solved or an unsolvable domain keeps being sampled a little and can come back; a domain with
fewer than a quarter of a window seen keeps its full weight. With `curriculum`, a domain that
has difficulty levels (`Domain.levels`) starts at level 0 and moves up one level when a full
window's pass rate reaches `promote_at`; its window then starts afresh. Without it, training
draws the top level, the one held-out evaluation always uses. Everything here is restored on
`--resume` (`state_dict`). It decides nothing about resources: `scheduler.global_` does.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Mapping, Sequence

from tempering.config import SchedulerConfig
from tempering.jsonvalue import JSON, JSONObject


@dataclass
class _Record:
    passes: deque = field(default_factory=deque)  # pass rate of each recent group
    signals: deque = field(default_factory=deque)  # 1.0 where a recent group's rewards differed
    level: int = 0
    promotions: int = 0


class Curriculum:
    def __init__(self, cfg: SchedulerConfig, base: Mapping[str, float], levels: Mapping[str, int]):
        self.cfg, self.base, self.levels = cfg, dict(base), dict(levels)
        self._records = {name: self._new(name) for name in base}

    def _new(self, name: str) -> _Record:
        w = self.cfg.window
        top = self.levels.get(name, 1) - 1
        return _Record(deque(maxlen=w), deque(maxlen=w), 0 if self.cfg.curriculum else top)

    def record(self, domain: str, outcomes: Sequence[float], rewards: Sequence[float]) -> bool:
        """One scored group of `domain` (its samples' outcomes and total rewards, failed ones
        left out). -> whether the domain moved up a level."""
        if not outcomes:
            return False
        r = self._records[domain]
        r.passes.append(sum(outcomes) / len(outcomes))
        r.signals.append(1.0 if max(rewards) - min(rewards) > 1e-9 else 0.0)
        top = self.levels.get(domain, 1) - 1
        full = len(r.passes) == self.cfg.window
        if self.cfg.curriculum and r.level < top and full and self.pass_rate(domain) >= self.cfg.promote_at:
            r.level += 1
            r.promotions += 1
            r.passes.clear()
            r.signals.clear()
            return True
        return False

    def weight(self, domain: str) -> float:
        r, base = self._records[domain], self.base[domain]
        if not self.cfg.adaptive or len(r.signals) < max(2, self.cfg.window // 4):
            return base
        return base * max(self.cfg.floor, sum(r.signals) / len(r.signals))

    def weights(self) -> dict[str, float]:
        return {name: self.weight(name) for name in self.base}

    def level(self, domain: str) -> int:
        return self._records[domain].level

    def pass_rate(self, domain: str) -> float | None:
        p = self._records[domain].passes
        return sum(p) / len(p) if p else None

    def signal(self, domain: str) -> float | None:
        s = self._records[domain].signals
        return sum(s) / len(s) if s else None

    def state_dict(self) -> JSONObject:  # saved in a checkpoint's state.json
        return {name: {"passes": list(r.passes), "signals": list(r.signals), "level": r.level,
                       "promotions": r.promotions} for name, r in self._records.items()}

    def load_state_dict(self, state: Mapping[str, JSON]) -> None:
        """Restore what a checkpoint saved; domains no longer in the mix are dropped, new ones
        start fresh, and a level above a domain's top is clamped to it."""
        for name, saved in state.items():
            if name not in self._records:
                continue
            r = self._new(name)
            r.passes.extend(saved["passes"])
            r.signals.extend(saved["signals"])
            if self.cfg.curriculum:  # without it a domain draws its top level, whatever was saved
                r.level = min(int(saved["level"]), self.levels.get(name, 1) - 1)
            r.promotions = int(saved.get("promotions", 0))
            self._records[name] = r
