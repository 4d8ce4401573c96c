"""`KVUsage`: the KV bytes the engine holds, where they are and why.

Why: the blocks referenced by sequences (their context), idle blocks the prefix cache keeps for
a later hit, the rest of the pool (free), and preempted sequences' blocks in the swap space. Where: in memory (on a CPU pool measured with
mincore, so pages never written or paged out are not counted; on another device the pool is
allocated up front and counted whole), and, with `engine.kv_offload_dir`, on disk in the
offload file (its allocated blocks). Bytes cover keys and values of every layer, plus int8
scales and block summaries where the pool keeps them. It reads the pool and the block manager;
it changes nothing.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass

from tempering.engine.block_manager import BlockManager
from tempering.engine.kv_cache import KVPool
from tempering.engine.kv_offload import tensor_resident_bytes
from tempering.engine.kv_swap import SwapSpace


@dataclass(frozen=True)
class KVUsage:
    device: str  # where the pool lives
    block_bytes: int  # one block, every layer, keys and values (scales included)
    running_bytes: int  # blocks referenced by sequences
    cached_bytes: int  # idle blocks kept for prefix-cache hits
    free_bytes: int  # blocks holding nothing anyone can use
    swapped_bytes: int  # preempted sequences' blocks in the host swap space (engine.swap_blocks)
    resident_bytes: int  # of all the pool's tensors, in device memory now
    file_bytes: int  # on disk in the offload file (0 without offload)

    def as_dict(self) -> dict:
        return asdict(self)


def kv_usage(pool: KVPool, blocks: BlockManager, swap: SwapSpace | None = None) -> KVUsage:
    block_bytes = pool.bytes_per_token * pool.block_size
    swapped = swap.num_blocks - swap.num_free if swap is not None else 0
    running = sum(1 for r in blocks.ref if r > 0)
    cached = len(blocks.evictable)
    tensors = [t for group in _tensor_groups(pool) for t in group]
    if pool.device.type != "cpu":
        resident = sum(t.numel() * t.element_size() for t in tensors)
    else:
        small = [t for t in tensors if pool.offload is None or not _in_file(t, pool)]
        resident = sum(tensor_resident_bytes(t) for t in small)
        if pool.offload is not None:
            resident += pool.offload.files.resident_bytes()
    on_disk = os.fstat(pool.offload.files.file.fileno()).st_blocks * 512 if pool.offload is not None else 0
    return KVUsage(str(pool.device), block_bytes, running * block_bytes, cached * block_bytes,
                   (blocks.num_blocks - running - cached) * block_bytes, swapped * block_bytes, resident, on_disk)


def _tensor_groups(pool: KVPool) -> list[list]:
    groups = [pool.k, pool.v]
    if pool.quantized:
        groups += [pool.k_scale, pool.v_scale]
    if pool.summarised:
        groups += [pool.k_min, pool.k_max, pool.k_sum, pool.v_sum]
    return groups


def _in_file(t, pool: KVPool) -> bool:
    return any(t is x for x in pool.k) or any(t is x for x in pool.v)
