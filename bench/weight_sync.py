"""Weight sync benchmark: what one sync of a ~25M-parameter model (fp32, ~101 MB, bench/engine.py's
architecture) to 2 engine replicas costs, through the shared-memory `WeightStore`, through the
gloo `BroadcastPublisher` and (when Ray is installed) through Ray's object store
(`BlobPublisher`, a run's path on Ray), in the same run. Prints one JSON object.

Each replica is a spawned process (an actor of a private Ray instance for the object store) with a real engine (`EngineSync`, partial rollouts) that loads
every version as soon as it can. Per mode, one untimed warm-up sync (the broadcast forms its group
there), then `--syncs` timed ones, each waited for at both replicas before the next. Reported per
sync (medians): `publish_s` (the trainer's `publish`: for the store one copy into shared memory,
for the broadcast the transfer to both replicas and their acknowledgements), `pull_s` (a
replica's `pull`: the copy into its engine), `end_to_end_s` (from `publish` to both replicas
reporting the version loaded), and MB/s of the payload (one copy of the weights; the broadcast
sends it to each replica) over `publish_s` and over `end_to_end_s`, and milliseconds per MB
end to end. Per mode too: `runtime_start_s` (a private Ray instance's start; the local runtime's
is nothing) and `first_version_loaded_s` (from that start to both replicas started, their
engines built and the first version loaded). MB = 1e6 bytes.

    python bench/weight_sync.py [--syncs 5] [--replicas 2]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tempering.engine import LLM  # noqa: E402
from tempering.models import Arch, build_model  # noqa: E402
from tempering.runtime import LocalRuntime  # noqa: E402
from tempering.weights import BroadcastPublisher, BroadcastReceiver, EngineSync, WeightStore  # noqa: E402
from tempering.weights.blobs import BlobPublisher  # noqa: E402
from tempering.weights.layout import distinct  # noqa: E402

ARCH = Arch(vocab_size=16384, hidden_size=384, intermediate_size=1024, num_hidden_layers=8,
            num_attention_heads=6, num_key_value_heads=2, head_dim=64, max_position_embeddings=4096)
DEADLINE_S = 300.0


def replica(mode: str, handle, rank: int, last: int, reports) -> None:
    """Load every version up to `last` as it arrives; report each load's pull seconds."""
    torch.set_num_threads(1)
    engine = LLM(build_model(ARCH, seed=100 + rank), max_seq_len=64, kv_blocks=16, version=-1)
    source = {"store": lambda: handle, "broadcast": lambda: BroadcastReceiver(handle, rank, engine.model),
              "ray_object_store": lambda: handle.open()}[mode]()
    sync = EngineSync(source, engine, partial=True)
    deadline = time.monotonic() + DEADLINE_S
    while engine.version < last:
        if time.monotonic() > deadline:
            raise TimeoutError(f"replica {rank}: at version {engine.version} after {DEADLINE_S} s")
        before = sync.stats.pull_s
        if sync.poll():
            reports.put((rank, engine.version, sync.stats.pull_s - before), DEADLINE_S, f"replica {rank}")
        else:
            time.sleep(0.001)
    if mode != "store":
        source.close()


def run_mode(mode: str, model, replicas: int, syncs: int) -> dict:
    """`store` and `broadcast` with replicas as local processes; `ray_object_store` on a private
    Ray instance (started here: its start-up is reported), replicas as actors, each version a
    blob in the object store (`BlobPublisher`, what a run on Ray uses)."""
    started = time.perf_counter()
    runtime = LocalRuntime()
    if mode == "ray_object_store":
        from tempering.runtime.ray import RayRuntime

        runtime = RayRuntime("local", num_cpus=replicas)
    runtime_s = time.perf_counter() - started
    reports = runtime.queue(0, "reports")
    if mode == "store":
        publisher = WeightStore(model, runtime.ctx)
        handles, payload = [publisher] * replicas, publisher.nbytes
    elif mode == "broadcast":
        publisher = BroadcastPublisher(model, replicas, timeout_s=DEADLINE_S)
        handles, payload = [publisher.group] * replicas, publisher.layout.nbytes
    else:
        publisher = BlobPublisher(runtime, DEADLINE_S)
        handles = [publisher.channel(f"replica {r}") for r in range(1, replicas + 1)]
        payload = sum(t.nbytes for t in distinct(model.state_dict()).values())
    workers = [runtime.spawn(f"replica {r}", replica, mode, handles[r - 1], r, syncs, reports)
               for r in range(1, replicas + 1)]
    publish_s, pull_s, end_to_end_s, ready_s = [], [], [], None
    try:
        for version in range(syncs + 1):  # version 0: the warm-up
            with torch.no_grad():
                next(model.parameters()).add_(1e-3)  # a new version: different weights
            start = time.perf_counter()
            publisher.publish(model, version)
            published = time.perf_counter()
            loads = [reports.get(DEADLINE_S, "bench", workers) for _ in workers]
            assert all(v == version for _, v, _ in loads), loads
            if version == 0:
                ready_s = time.perf_counter() - started  # the runtime up, replicas placed and loaded
            else:
                publish_s.append(published - start)
                end_to_end_s.append(time.perf_counter() - start)
                pull_s.extend(s for _, _, s in loads)
        for w in workers:
            w.join(DEADLINE_S)
    finally:
        for w in workers:
            w.join(0)
        if mode == "broadcast":
            publisher.close()
        runtime.close()
    mb = payload / 1e6
    med = statistics.median
    return {"MB": round(mb, 1), "runtime_start_s": round(runtime_s, 2), "first_version_loaded_s": round(ready_s, 2),
            "publish_s": round(med(publish_s), 4), "pull_s": round(med(pull_s), 4),
            "end_to_end_s": round(med(end_to_end_s), 4), "publish_MB_per_s": round(mb / med(publish_s), 1),
            "end_to_end_MB_per_s": round(mb / med(end_to_end_s), 1),
            "end_to_end_ms_per_MB": round(1e3 * med(end_to_end_s) / mb, 3),
            "end_to_end_s_all": [round(s, 4) for s in end_to_end_s]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--syncs", type=int, default=5)
    ap.add_argument("--replicas", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(1)
    model = build_model(ARCH, seed=0)
    params = sum(p.numel() for p in model.parameters())
    out = {"parameters_M": round(params / 1e6, 1), "replicas": args.replicas, "syncs": args.syncs,
           "cpus": os.cpu_count(), "load_before": round(os.getloadavg()[0], 2)}
    modes = ["store", "broadcast"] + (["ray_object_store"] if importlib.util.find_spec("ray") else [])
    for mode in modes:
        out[mode] = run_mode(mode, model, args.replicas, args.syncs)
    out["load_after"] = round(os.getloadavg()[0], 2)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
