"""Sharded weight sync benchmark: a ~25M-parameter model (fp32, bench/weight_sync.py's
architecture) on 2 gloo trainer ranks (FSDP2, tensor parallel with --tp 2, or 2 pipeline stages
with --pp 2), published to a folder two ways, each `--syncs` times after one untimed warm-up.
Prints one JSON object.

`shards` (weights/shards.py): every rank writes its own pieces, rank 0 makes the version
current; an engine's side reads every rank's file and assembles the full tensors. `gather`: the
full weights gathered on rank 0 (torch.distributed.checkpoint's full state dict, as
`TrainerGroup` does every step when it does not publish per shard; a pipeline's stages gathered
with `stage_state.full_weights`), written there as one file, read back whole. Reported per sync
(medians): `publish_s` (the slowest rank's), `assemble_s` (the engine's read), ms per MB of
the payload (one copy of the weights) for each and for both, and the largest share of the model
one rank held in memory at once (bytes of its own pieces vs the whole). MB = 1e6 bytes.

    python bench/shard_sync.py [--syncs 3] [--tp 1 | --pp 1]
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.multiprocessing as mp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tempering.config import ParallelizeConfig  # noqa: E402
from tempering.models import Arch, build_model  # noqa: E402
from tempering.weights.layout import distinct  # noqa: E402
from tempering.weights.shards import ShardPublisher, ShardSource  # noqa: E402

ARCH = Arch(vocab_size=16384, hidden_size=384, intermediate_size=1024, num_hidden_layers=8,
            num_attention_heads=6, num_key_value_heads=2, head_dim=64, max_position_embeddings=4096)
WORLD = 2
MB = 1e6


def _rank(rank: int, port: int, folder: Path, syncs: int, tp: int, pp: int) -> None:
    import torch.distributed as dist
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    from tempering.trainer.distributed import init_ranks
    from tempering.trainer.stage_state import HEAD, full_weights, holds_copy

    torch.set_num_threads(1)
    ranks = init_ranks(backend="gloo", address=f"127.0.0.1:{port}", rank=rank, world=WORLD, timeout_s=300,
                       parallelize=ParallelizeConfig(tp=tp, pp=pp))
    model = ranks.shard(build_model(ARCH))
    skip = frozenset({HEAD}) if holds_copy(model) else frozenset()  # a pipeline's copy of a tied head
    shards, gather = ShardPublisher(folder / "shards", own=pp > 1, skip=skip), []
    for version in range(syncs + 1):
        dist.barrier()
        start = time.perf_counter()
        if pp > 1:
            full = full_weights(model, ranks)
        else:
            full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        if rank == 0:
            torch.save(distinct(full), folder / "gathered.pt")
        dist.barrier()
        gather.append(time.perf_counter() - start)
        del full
        before = shards.stats.seconds
        dist.barrier()
        shards.publish(model, version)
        times = [None] * WORLD
        dist.all_gather_object(times, shards.stats.seconds - before)
        if rank == 0 and version > 0:  # the first: a warm-up
            (folder / f"times{version}.json").write_text(json.dumps({"shards": max(times), "gather": gather[-1],
                                                                     "own_bytes": shards.stats.bytes // (version + 1)}))
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--syncs", type=int, default=3)
    parser.add_argument("--tp", type=int, default=1)
    parser.add_argument("--pp", type=int, default=1)
    # the engine's side reads with as many torch threads as a rollout worker has (a run on this
    # 2-core machine gives each process 1); with 2 on a loaded machine each small copy waits ms
    parser.add_argument("--read-threads", type=int, default=1)
    args = parser.parse_args()
    payload = sum(t.nbytes for t in distinct(build_model(ARCH).state_dict()).values())
    with tempfile.TemporaryDirectory() as tmp, socket.socket() as s:
        folder = Path(tmp)
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        mp.start_processes(_rank, args=(port, folder, args.syncs, args.tp, args.pp), nprocs=WORLD, start_method="spawn")
        runs = [json.loads((folder / f"times{v}.json").read_text()) for v in range(1, args.syncs + 1)]
        torch.set_num_threads(args.read_threads)
        source, assemble, read = ShardSource(folder / "shards"), [], []
        for _ in range(args.syncs):
            start = time.perf_counter()
            source.state(source.version)
            assemble.append(time.perf_counter() - start)
            start = time.perf_counter()
            torch.load(folder / "gathered.pt")
            read.append(time.perf_counter() - start)
    med = statistics.median
    out = {"params": sum(p.numel() for p in build_model(ARCH).parameters()), "payload_mb": payload / MB,
           "ranks": WORLD, "tp": args.tp, "pp": args.pp,
           "syncs": args.syncs, "read_threads": args.read_threads}
    for name, publish, load in (("shards", [r["shards"] for r in runs], assemble),
                                ("gather", [r["gather"] for r in runs], read)):
        out[name] = {"publish_s": med(publish), "assemble_s": med(load),
                     "publish_ms_per_mb": 1e3 * med(publish) / (payload / MB),
                     "end_to_end_ms_per_mb": 1e3 * (med(publish) + med(load)) / (payload / MB)}
    out["shards"]["largest_rank_share"] = runs[-1]["own_bytes"] / payload
    out["gather"]["largest_rank_share"] = 1.0  # rank 0 holds the whole model
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
