"""Runtimes: how workers are started and talk. `local` is the embedded default (processes on one
machine); a Ray runtime maps the same interface onto a cluster."""

from tempering.runtime.local import BoundedQueue, LocalRuntime, Stall, Worker, WorkerFailed, threads_per_process
from tempering.runtime.stop import StopRequest

__all__ = ["LocalRuntime", "BoundedQueue", "Worker", "WorkerFailed", "Stall", "StopRequest", "threads_per_process"]
