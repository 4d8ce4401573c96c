"""Cold KV blocks out of memory: the pool's key and value tensors backed by a memory-mapped file.

With `engine.kv_offload_dir`, `KVPool` allocates its keys and values from one sparse, unlinked
file there; reads and writes go through the mapping, so correctness never depends on residency.
This module adds the policy: blocks a step reads or writes are marked touched; after each step
`evict` writes back and drops from memory the blocks no step touched in the last `idle_steps`
(msync, MADV_DONTNEED, POSIX_FADV_DONTNEED); before a gather, `prefetch` hints evicted blocks back
in (MADV_WILLNEED). Dense layers keep their blocks resident; the saving comes from sparse layers,
idle cached blocks and long contexts. Block summaries and int8 scales stay in memory.
`resident_bytes` measures residency (mincore). CPU pools only."""

from __future__ import annotations

import ctypes
import mmap
import os
import tempfile
from pathlib import Path

import torch

_PAGE = mmap.PAGESIZE
_MADV_DONTNEED = mmap.MADV_DONTNEED
_LIBC = ctypes.CDLL(None, use_errno=True)


class MappedTensors:
    """Page-aligned regions of one unlinked file, each viewed as a tensor; plus the page
    operations on byte ranges of a region."""

    def __init__(self, directory: str | Path, sizes: list[int]):
        d = Path(directory)
        if not d.is_dir():
            raise ValueError(f"engine.kv_offload_dir: {str(d)!r} is not a directory")
        self.offsets, total = [], 0
        for n in sizes:
            self.offsets.append(total)
            total += -(-n // _PAGE) * _PAGE
        try:
            self.file = tempfile.TemporaryFile(dir=d)
            self.file.truncate(max(total, _PAGE))
        except OSError as e:
            raise ValueError(f"engine.kv_offload_dir: cannot create the KV file in {str(d)!r}: {e}") from None
        self.map = mmap.mmap(self.file.fileno(), max(total, _PAGE))
        # no readahead or fault-around: a fault brings in its page, not its neighbours (cold blocks)
        self.map.madvise(mmap.MADV_RANDOM)
        self.base = ctypes.addressof(ctypes.c_char.from_buffer(self.map))
        self.size = total

    def tensor(self, index: int, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        count = 1
        for s in shape:
            count *= s
        if count == 0:
            return torch.empty(shape, dtype=dtype)
        return torch.frombuffer(self.map, dtype=dtype, count=count, offset=self.offsets[index]).view(shape)

    def pages(self, start: int, end: int, inward: bool) -> tuple[int, int]:
        """The page-aligned byte range inside [start, end) (inward) or covering it."""
        if inward:
            return -(-start // _PAGE) * _PAGE, end // _PAGE * _PAGE
        return start // _PAGE * _PAGE, -(-end // _PAGE) * _PAGE

    def evict(self, start: int, end: int, flush: bool = True) -> int:
        """Drop the whole pages inside [start, end) from memory, first writing them to the file
        (`flush`; pages not written since they were last evicted need not be) -> bytes."""
        lo, hi = self.pages(start, end, inward=True)
        if hi <= lo:
            return 0
        if flush:
            self.map.flush(lo, hi - lo)
        self.map.madvise(_MADV_DONTNEED, lo, hi - lo)
        os.posix_fadvise(self.file.fileno(), lo, hi - lo, os.POSIX_FADV_DONTNEED)
        return hi - lo

    def prefetch(self, start: int, end: int) -> None:
        lo, hi = self.pages(start, end, inward=False)
        self.map.madvise(mmap.MADV_WILLNEED, lo, min(hi, len(self.map)) - lo)

    def resident_bytes(self, start: int = 0, end: int | None = None) -> int:
        lo, hi = self.pages(start, self.size if end is None else end, inward=False)
        return resident_bytes(self.base + lo, hi - lo)


def resident_bytes(address: int, length: int) -> int:
    """Bytes of the pages in [address, address + length) that are in memory (mincore)."""
    lo = address // _PAGE * _PAGE
    pages = -(-(address + length - lo) // _PAGE)
    if pages <= 0:
        return 0
    vec = (ctypes.c_ubyte * pages)()
    if _LIBC.mincore(ctypes.c_void_p(lo), ctypes.c_size_t(pages * _PAGE), vec) != 0:
        raise OSError(ctypes.get_errno(), "mincore failed on the KV pool's memory")
    return sum(v & 1 for v in bytes(vec)) * _PAGE


def tensor_resident_bytes(t: torch.Tensor) -> int:
    """Resident bytes of a contiguous CPU tensor's storage."""
    return resident_bytes(t.data_ptr(), t.numel() * t.element_size()) if t.numel() else 0


class Offload:
    """When each block of each layer's key/value tensors was last touched and which are resident;
    evicts the idle ones after each step. Tensor i of `MappedTensors` is layer i // 2's keys
    (even) or values (odd)."""

    def __init__(self, directory: str | Path, layers: int, num_blocks: int, block_bytes: int, idle_steps: int = 8):
        """`idle_steps`: a block leaves memory once that many steps went by without touching it,
        checked every `idle_steps` steps. Block-sparse selection moves from step to step, so
        evicting after one idle step writes back and faults in the same blocks over and over
        (measured: decode 9x slower), and one pass every few steps finds longer runs of blocks
        (fewer system calls)."""
        self.files = MappedTensors(directory, [num_blocks * block_bytes] * (2 * layers))
        self.num_blocks, self.block_bytes, self.idle_steps = num_blocks, block_bytes, idle_steps
        self.step = 0
        self.last = torch.full((layers, num_blocks), -1, dtype=torch.long)  # the step that last touched it
        self.resident = torch.zeros(layers, num_blocks, dtype=torch.bool)
        self.dirty = torch.zeros(layers, num_blocks, dtype=torch.bool)  # written since it was last evicted
        self.stats = {"evicted_bytes": 0, "written_back_bytes": 0, "prefetched_blocks": 0}

    def touch(self, layer: int, blocks: torch.Tensor, write: bool = False) -> None:
        self.last[layer].index_fill_(0, blocks, self.step)
        self.resident[layer].index_fill_(0, blocks, True)
        if write:
            self.dirty[layer].index_fill_(0, blocks, True)

    def prefetch(self, layer: int, blocks: torch.Tensor) -> None:
        """Blocks about to be read: hint the evicted ones in, one run of adjacent blocks at a time."""
        cold = blocks[~self.resident[layer, blocks]].unique()  # evicted, or never touched
        if cold.numel():
            self.stats["prefetched_blocks"] += cold.numel()
            for lo, hi in _runs(cold):
                for off in self._offsets(layer):
                    self.files.prefetch(off + lo * self.block_bytes, off + hi * self.block_bytes)
        self.touch(layer, blocks)

    def evict(self) -> None:
        """After a step: every `idle_steps` steps, the resident blocks no step touched in the last
        `idle_steps` leave memory (the dirty ones written back first)."""
        self.step += 1
        if self.step % self.idle_steps:
            return
        cold = self.resident & (self.last < self.step - self.idle_steps)
        for layer in range(cold.shape[0]):
            for lo, hi in _runs(cold[layer].nonzero().flatten()):
                flush = bool(self.dirty[layer, lo:hi].any())
                for off in self._offsets(layer):
                    n = self.files.evict(off + lo * self.block_bytes, off + hi * self.block_bytes, flush)
                    self.stats["evicted_bytes"] += n
                    self.stats["written_back_bytes"] += n if flush else 0
        self.resident &= ~cold
        self.dirty &= ~cold

    def _offsets(self, layer: int) -> tuple[int, int]:
        """Byte offsets of the layer's keys and values in the file."""
        return self.files.offsets[2 * layer], self.files.offsets[2 * layer + 1]


def _runs(sorted_blocks: torch.Tensor) -> list[tuple[int, int]]:
    """Sorted block ids -> [lo, hi) runs of adjacent ids."""
    if not sorted_blocks.numel():
        return []
    ids = sorted_blocks.tolist()
    runs, lo, prev = [], ids[0], ids[0]
    for b in ids[1:]:
        if b != prev + 1:
            runs.append((lo, prev + 1))
            lo = b
        prev = b
    runs.append((lo, prev + 1))
    return runs
