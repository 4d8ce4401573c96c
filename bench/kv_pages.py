"""KV pool pages: decode attention over a CPU pool whose keys and values ask for 2 MiB pages (the
engine's default on Linux, `kv_cache._advise_huge_pages`) against one left on 4 KiB pages. Both
pools hold the same values; each round draws random 16-slot blocks for 64 decode rows and runs
`paged_decode.attend` over every layer of each pool in turn (alternating, so both see the same
machine load), and the report gives each pool's best and median ms per call and the pools'
AnonHugePages. Prints one JSON object.

    python bench/kv_pages.py [--rounds 30] [--blocks 4096] [--keys 256]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tempering.engine import kv_cache  # noqa: E402
from tempering.engine.cpu import paged_decode  # noqa: E402
from tempering.engine.kv_cache import KVPool  # noqa: E402

LAYERS, BLOCK, KV_HEADS, REP, HEAD_DIM, ROWS = 8, 16, 2, 3, 64, 64


def anon_huge_kib() -> int:
    for line in Path("/proc/self/smaps_rollup").read_text().splitlines():
        if line.startswith("AnonHugePages:"):
            return int(line.split()[1])
    return 0


def pool(blocks: int, huge: bool) -> KVPool:
    advise = kv_cache._advise_huge_pages
    if not huge:
        kv_cache._advise_huge_pages = lambda t: None
    try:
        p = KVPool(LAYERS, blocks, BLOCK, KV_HEADS, HEAD_DIM)
    finally:
        kv_cache._advise_huge_pages = advise
    g = torch.Generator().manual_seed(0)
    for t in p.k + p.v:
        t.normal_(generator=g)  # touched now: pages are taken as the pool's advice says
    return p


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--blocks", type=int, default=4096, help="pool blocks per layer (16 slots each)")
    ap.add_argument("--keys", type=int, default=256, help="keys each decode row reads (a multiple of 16)")
    args = ap.parse_args()
    if args.rounds < 1 or args.blocks < 1 or args.keys < BLOCK or args.keys % BLOCK:
        ap.error("--rounds and --blocks must be positive, --keys a positive multiple of 16")
    if not paged_decode.built():
        ap.error("the paged decode kernel is not built here (no C compiler?)")
    torch.set_num_threads(1)
    before = anon_huge_kib()
    pools = {"4k": pool(args.blocks, huge=False)}
    after_4k = anon_huge_kib()
    pools["2m"] = pool(args.blocks, huge=True)
    huge = {"4k": after_4k - before, "2m": anon_huge_kib() - after_4k}
    g = torch.Generator().manual_seed(1)
    ms: dict[str, list[float]] = {name: [] for name in pools}
    per_row = args.keys // BLOCK
    for _ in range(args.rounds):
        blocks = torch.randint(0, args.blocks, (ROWS, per_row), generator=g)
        index = (blocks[:, :, None] * BLOCK + torch.arange(BLOCK)).reshape(ROWS, args.keys)
        mask = torch.ones(ROWS, args.keys, dtype=torch.bool)
        q = torch.randn(ROWS, KV_HEADS, REP, HEAD_DIM, generator=g)
        for name, p in pools.items():
            start = time.process_time()
            for layer in range(LAYERS):
                paged_decode.attend(p, layer, q, index, mask)
            ms[name].append((time.process_time() - start) / LAYERS * 1e3)
    report = {name: {"best_ms": round(min(v), 3), "median_ms": round(statistics.median(v), 3),
                     "anon_huge_pages_kib": huge[name]} for name, v in ms.items()}
    report["ratio_4k_over_2m_best"] = round(min(ms["4k"]) / min(ms["2m"]), 3)
    report["ratio_4k_over_2m_median"] = round(statistics.median(ms["4k"]) / statistics.median(ms["2m"]), 3)
    report["rows"], report["keys_per_row"], report["pool_mib_per_layer"] = ROWS, args.keys, round(
        2 * args.blocks * BLOCK * KV_HEADS * HEAD_DIM * 4 / 2**20, 1)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
