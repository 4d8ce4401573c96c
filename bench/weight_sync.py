"""Weight sync benchmark: what one sync of a ~25M-parameter model (fp32, ~101 MB, bench/engine.py's
architecture) to 2 engine replicas costs, through the shared-memory `WeightStore` and through the
gloo `BroadcastPublisher`, in the same run. Prints one JSON object.

Each replica is a spawned process with a real engine (`EngineSync`, partial rollouts) that loads
every version as soon as it can. Per mode, one untimed warm-up sync (the broadcast forms its group
there), then `--syncs` timed ones, each waited for at both replicas before the next. Reported per
sync (medians): `publish_s` (the trainer's `publish`: for the store one copy into shared memory,
for the broadcast the transfer to both replicas and their acknowledgements), `pull_s` (a
replica's `pull`: the copy into its engine), `end_to_end_s` (from `publish` to both replicas
reporting the version loaded), and MB/s of the payload (one copy of the weights; the broadcast
sends it to each replica) over `publish_s` and over `end_to_end_s`. MB = 1e6 bytes.

    python bench/weight_sync.py [--syncs 5] [--replicas 2]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.multiprocessing as tmp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tempering.engine import LLM  # noqa: E402
from tempering.models import Arch, build_model  # noqa: E402
from tempering.weights import BroadcastPublisher, BroadcastReceiver, EngineSync, WeightStore  # noqa: E402

ARCH = Arch(vocab_size=16384, hidden_size=384, intermediate_size=1024, num_hidden_layers=8,
            num_attention_heads=6, num_key_value_heads=2, head_dim=64, max_position_embeddings=4096)
DEADLINE_S = 300.0


def replica(mode: str, handle, rank: int, last: int, reports) -> None:
    """Load every version up to `last` as it arrives; report each load's pull seconds."""
    torch.set_num_threads(1)
    engine = LLM(build_model(ARCH, seed=100 + rank), max_seq_len=64, kv_blocks=16, version=-1)
    source = handle if mode == "store" else BroadcastReceiver(handle, rank, engine.model)
    sync = EngineSync(source, engine, partial=True)
    deadline = time.monotonic() + DEADLINE_S
    while engine.version < last:
        if time.monotonic() > deadline:
            raise TimeoutError(f"replica {rank}: at version {engine.version} after {DEADLINE_S} s")
        before = sync.stats.pull_s
        if sync.poll():
            reports.put((rank, engine.version, sync.stats.pull_s - before))
        else:
            time.sleep(0.001)
    if mode == "broadcast":
        source.close()


def run_mode(mode: str, model, replicas: int, syncs: int) -> dict:
    ctx = tmp.get_context("spawn")
    reports = ctx.Queue()
    if mode == "store":
        publisher = WeightStore(model, ctx)
        handle, payload = publisher, publisher.nbytes
    else:
        publisher = BroadcastPublisher(model, replicas, timeout_s=DEADLINE_S)
        handle, payload = publisher.group, publisher.layout.nbytes
    procs = [ctx.Process(target=replica, args=(mode, handle, r, syncs, reports), daemon=True)
             for r in range(1, replicas + 1)]
    for p in procs:
        p.start()
    publish_s, pull_s, end_to_end_s = [], [], []
    try:
        for version in range(syncs + 1):  # version 0: the warm-up
            with torch.no_grad():
                next(model.parameters()).add_(1e-3)  # a new version: different weights
            start = time.perf_counter()
            publisher.publish(model, version)
            published = time.perf_counter()
            loads = [reports.get(timeout=DEADLINE_S) for _ in procs]
            assert all(v == version for _, v, _ in loads), loads
            if version > 0:
                publish_s.append(published - start)
                end_to_end_s.append(time.perf_counter() - start)
                pull_s.extend(s for _, _, s in loads)
        for p in procs:
            p.join(DEADLINE_S)
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
        if mode == "broadcast":
            publisher.close()
    mb = payload / 1e6
    med = statistics.median
    return {"MB": round(mb, 1), "publish_s": round(med(publish_s), 4), "pull_s": round(med(pull_s), 4),
            "end_to_end_s": round(med(end_to_end_s), 4), "publish_MB_per_s": round(mb / med(publish_s), 1),
            "end_to_end_MB_per_s": round(mb / med(end_to_end_s), 1),
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
    for mode in ("store", "broadcast"):
        out[mode] = run_mode(mode, model, args.replicas, args.syncs)
    out["load_after"] = round(os.getloadavg()[0], 2)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
