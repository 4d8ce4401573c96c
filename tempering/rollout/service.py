"""`RolloutService`: the trainer's handle on its rollout worker process.

It starts the worker (`runtime.local`), publishes weights to it through the `WeightStore`, takes
its batches from a bounded queue, and asks it for held-out evaluations (which run in the worker,
on its engine and sandbox: the trainer process builds neither). Every wait has the run's stall
deadline and names the worker; a worker that raised or died surfaces at the next wait.
"""

from __future__ import annotations

from typing import Any

from tempering.evaluation import EvalResult
from tempering.models import Decoder
from tempering.rollout.worker import EvalRequest, RolloutBatch, RolloutSpec, run_rollout_worker
from tempering.runtime import LocalRuntime
from tempering.weights import WeightStore


class RolloutService:
    def __init__(self, spec: RolloutSpec, model: Decoder, version: int, queue_size: int):
        self.timeout = spec.stall_timeout_s
        runtime = LocalRuntime()
        self.store = WeightStore(model, runtime.ctx)
        self.store.publish(model, version)
        self.batches, self._requests, self._replies = runtime.queue(queue_size), runtime.ctx.Queue(), runtime.queue(1)
        self._stop = runtime.event()
        self.worker = runtime.spawn("rollout", run_rollout_worker, spec, self.store, self.batches, self._requests,
                                    self._replies, self._stop)

    def publish(self, model: Decoder, version: int) -> None:
        self.store.publish(model, version)

    def next_batch(self, stop: Any) -> RolloutBatch | None:
        """The next batch; None if `stop` was set while waiting."""
        return self.batches.get(self.timeout, "rollout worker", [self.worker], stop)

    def evaluate(self, label: str) -> EvalResult:
        """Greedy held-out evaluation of the version published last."""
        self._requests.put(EvalRequest(label, self.store.version))
        return self._replies.get(self.timeout, f"rollout worker (evaluation {label})", [self.worker])

    def close(self) -> None:
        self._stop.set()
        self.batches.drain()
        self.worker.join(timeout=10)

    def __enter__(self) -> "RolloutService":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
