"""`SwapSpace`: a bounded host-side store for the KV blocks of sequences preempted by swap.

It mirrors the `KVPool`'s per-layer tensors (keys and values; their int8 scales when the pool is
quantized; each block's min/max key and key and value sums when the pool keeps block summaries) for a fixed number of
blocks, on the CPU (pinned when the pool is on a GPU). `swap_out` copies whole pool blocks into
free host blocks, `swap_in` copies host blocks back into (other) pool blocks and frees them. Copies are by slot ranges of the pool's slot-major layout
(slot = block * block_size + offset), read straight from the pool's tensors.

It does not decide what to swap or when, and does not free or take pool blocks: the scheduler
does that (and calls it between steps, when the model runner is not using the blocks). It
knows nothing of sequences, reference counts or the prefix cache.
"""

from __future__ import annotations

import torch

from tempering.engine.kv_cache import KVPool

HOST = torch.device("cpu")


class SwapSpace:
    def __init__(self, pool: KVPool, num_blocks: int):
        if num_blocks < 1:
            raise ValueError(f"SwapSpace: need num_blocks >= 1, got {num_blocks}")
        self.pool, self.num_blocks, self.block_size = pool, num_blocks, pool.block_size
        # Pinned host memory only helps (and only exists) alongside a GPU.
        pin = pool.device.type == "cuda" and torch.cuda.is_available()
        # (pool tensors, host tensors) per kind; slot-major kinds have block_size rows per block
        self._slotted = [(per_layer, self._mirror(per_layer, num_blocks * self.block_size, pin))
                         for per_layer in self._pool_slotted()]
        self._per_block = [(per_layer, self._mirror(per_layer, num_blocks, pin))
                           for per_layer in self._pool_per_block()]
        self.free: list[int] = list(range(num_blocks - 1, -1, -1))  # a stack, like the pool's

    def _pool_slotted(self) -> list[list[torch.Tensor]]:
        p = self.pool
        return [p.k, p.v] + ([p.k_scale, p.v_scale] if p.quantized else [])

    def _pool_per_block(self) -> list[list[torch.Tensor]]:
        p = self.pool
        return [p.k_min, p.k_max, p.k_sum, p.v_sum] if p.summarised else []

    @staticmethod
    def _mirror(per_layer: list[torch.Tensor], rows: int, pin: bool) -> list[torch.Tensor]:
        """Host tensors shaped like `per_layer`'s with `rows` rows (torch.empty: pages are touched
        only when a swap writes them)."""
        return [torch.empty((rows, *t.shape[1:]), dtype=t.dtype, device=HOST, pin_memory=pin) for t in per_layer]

    @property
    def num_free(self) -> int:
        return len(self.free)

    def swap_out(self, blocks: list[int]) -> list[int]:
        """Copy pool `blocks` into free host blocks. -> the host blocks, in the same order.
        The caller checks `num_free` first; the pool blocks stay the caller's to free."""
        assert len(blocks) <= len(self.free), f"swap space: {len(blocks)} blocks asked, {len(self.free)} free"
        host = [self.free.pop() for _ in blocks]
        self._copy(blocks, host, to_host=True)
        return host

    def swap_in(self, host: list[int], blocks: list[int]) -> None:
        """Copy `host` blocks into pool `blocks` (taken by the caller) and free the host blocks."""
        assert len(host) == len(blocks)
        self._copy(blocks, host, to_host=False)
        self.release(host)

    def release(self, host: list[int]) -> None:
        """Free host blocks whose KV is no longer needed (an aborted or recomputed sequence)."""
        self.free.extend(reversed(host))

    def _copy(self, pool_blocks: list[int], host_blocks: list[int], to_host: bool) -> None:
        if not pool_blocks:
            return
        # One gather and one scatter per tensor instead of one small copy per block and tensor;
        # `.to` is a synchronous copy, so the pool blocks can be reused as soon as this returns.
        pool_device = self.pool.device
        pool_b, host_b = self._index(pool_blocks, pool_device), self._index(host_blocks, HOST)
        pool_s, host_s = self._slots(pool_b), self._slots(host_b)
        for kinds, pool_i, host_i in ((self._slotted, pool_s, host_s), (self._per_block, pool_b, host_b)):
            for pool_layers, host_layers in kinds:
                for on_pool, on_host in zip(pool_layers, host_layers):
                    if to_host:
                        on_host.index_copy_(0, host_i, on_pool.index_select(0, pool_i).to(HOST))
                    else:
                        on_pool.index_copy_(0, pool_i, on_host.index_select(0, host_i).to(pool_device))

    @staticmethod
    def _index(blocks: list[int], device: torch.device) -> torch.Tensor:
        return torch.tensor(blocks, dtype=torch.long, device=device)

    def _slots(self, blocks: torch.Tensor) -> torch.Tensor:
        """Block indices [B] -> their slots [B * block_size], block by block."""
        offsets = torch.arange(self.block_size, device=blocks.device)
        return (blocks[:, None] * self.block_size + offsets).reshape(-1)
