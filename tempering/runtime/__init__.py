"""Runtimes: how workers are started and talk. `local` is the embedded default (processes on one
machine); `runtime.ray` maps the same interface onto a Ray cluster and is imported only by name
(`from tempering.runtime.ray import RayRuntime`), so the default never needs Ray."""

from tempering.runtime.interface import Blob, Event, Queue, Resources, Runtime, Stall, StopSignal, WorkerFailed, WorkerHandle
from tempering.runtime.local import BoundedQueue, LocalBlob, LocalRuntime, Worker, threads_per_process
from tempering.runtime.stop import StopRequest

__all__ = ["Runtime", "Queue", "Event", "StopSignal", "WorkerHandle", "Blob", "LocalRuntime", "BoundedQueue", "LocalBlob", "Resources",
           "Worker", "WorkerFailed", "Stall", "StopRequest", "threads_per_process"]
