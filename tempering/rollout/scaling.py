"""`Scaling`: how many rollout replicas the service keeps, and the draining of those that leave.

It holds the target count. Without a policy (runtime.min_replicas = 0) the target is
runtime.max_replicas, fixed: the service starts replicas up to it whenever the runtime has room.
With one (`runtime.elastic.ElasticPolicy`) each batch the trainer takes is an observation (its
wait, its work between batches, the engines' generate seconds), and the policy's decision moves
the target between its bounds: one more replica (started once the runtime has room), or one
fewer, drained: the replica that holds the fewest groups is retired from placement (no new group
goes to it) and told to `Leave`; it finishes the groups it was sent, which are filed as any
others, and once it holds none and its worker has returned it is dropped. Nothing admitted is
handed back or run twice; if it dies while draining, its groups are re-placed as a lost
replica's are. Every decision goes into the batch's metrics (numbers) and its changes into
`decisions` (with the reason in words). It starts no replica itself (`service._grow`).
"""

from __future__ import annotations

import sys

from tempering.rollout.replicas import Replicas
from tempering.rollout.worker import Leave
from tempering.runtime.elastic import Decision, ElasticPolicy, Observation
from tempering.scheduler.global_ import GlobalScheduler


class Scaling:
    def __init__(self, replicas: Replicas, scheduler: GlobalScheduler, target: int,
                 policy: ElasticPolicy | None = None):
        self.replicas, self.scheduler, self.policy = replicas, scheduler, policy
        self.target = target  # replicas wanted (live and taking groups, or starting)
        self.decisions: list[dict[str, object]] = []  # each add or remove: batch, action, reason, replicas after
        self.left: list[str] = []  # the replicas that drained and left

    def wanted(self) -> int:
        """How many more replicas to start now (the service starts them when there is room)."""
        return self.target - len(self.replicas.taking()) - len(self.replicas.placing)

    def observe(self, batch: int, wait_s: float, work_s: float, generate_s: float) -> dict[str, float] | None:
        """One trainer cycle seen (None without a policy). -> the decision as the step's metrics."""
        if self.policy is None:
            return None
        changing = len(self.replicas.placing) + len(self.replicas.draining)
        obs = Observation(wait_s, work_s, generate_s, len(self.replicas.taking()), changing)
        decision = self.policy.observe(obs)
        if decision.action == "remove":
            self._drain_one(decision)
        elif decision.action == "add":
            self.target = decision.replicas
        if decision.action != "hold":
            self.decisions.append({"batch": batch, "action": decision.action, "reason": decision.reason,
                                   "detail": decision.detail, "replicas": decision.replicas})
            print(f"[tempering] elastic replicas: {decision.action} one ({decision.detail}); "
                  f"{decision.replicas} wanted", file=sys.stderr, flush=True)
        return decision.record(obs)

    def settle(self) -> list[str]:
        """Drop the draining replicas that hold no group and whose worker returned. -> their names."""
        left = []
        for name in sorted(self.replicas.draining):
            replica = self.replicas.live[name]
            if self.scheduler.placement.held_by(name) == 0 and not replica.worker.alive():
                replica.worker.check()  # a worker that raised on its way out is the run's failure
                self.replicas.drop(replica, wait=0)
                left.append(name)
        self.left += left
        return left

    def _drain_one(self, decision: Decision) -> None:
        """Retire the replica holding the fewest groups (the newest among equals)."""
        held = self.scheduler.placement.held_by
        name = min(self.replicas.taking(), key=lambda n: (held(n), -int(n.rsplit("-", 1)[1])))
        self.target = decision.replicas
        self.scheduler.retire(name)
        self.replicas.draining.add(name)
        # after every order sent to it (one queue, in order): it starts them all, then leaves
        self.replicas.send(name, Leave())
