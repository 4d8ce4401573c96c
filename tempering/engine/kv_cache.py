"""`KVPool`: the paged KV storage, one tensor per layer for keys and one for values.

Slot-major, `[num_blocks * block_size, kv_heads, head_dim]` on the model's device: writing a
step's tokens is one `index_copy_`, reading a batch's context one `index_select` per layer into a
reused buffer. Values are stored in the engine's dtype, in 16 bits under a wider model, or int8
with per-token scales (`kv_quant`), widened on gather. With `summaries` it keeps each block's
min, max and sum of keys and sum of values per layer (for block-sparse attention, `sparse`); with
`offload_dir` the tensors live in a memory-mapped file (`kv_offload`). On Linux a CPU pool asks
for 2 MiB pages, since decode reads blocks scattered over the pool. It knows nothing of
sequences. Measured costs of these choices: docs/benchmarks.md."""

from __future__ import annotations

import ctypes
import functools
import sys
from pathlib import Path

import torch

from tempering.engine.kv_offload import Offload
from tempering.engine.kv_quant import dequantize, quantize


STORAGE = {"fp32": None, "fp16": torch.float16, "bf16": torch.bfloat16, "int8": torch.int8}  # None: the model's


class KVPool:
    def __init__(self, layers: int, num_blocks: int, block_size: int, kv_heads: int, head_dim: int,
                 dtype: str = "fp32", device: torch.device | str = "cpu", model_dtype: torch.dtype = torch.float32,
                 summaries: bool = False, offload_dir: str | Path | None = None):
        if dtype not in STORAGE:
            raise ValueError(f"KVPool: kv dtype must be one of {sorted(STORAGE)}, got {dtype!r}")
        self.block_size, self.kv_heads, self.head_dim = block_size, kv_heads, head_dim
        self.quantized = dtype == "int8"
        # "fp32" keeps keys and values as the model computes them (its dtype: bf16 on a GPU);
        # `dtype` is what gathers return (the model's), `store_dtype` what the pool holds
        self.device, self.dtype = torch.device(device), model_dtype
        slots = num_blocks * block_size
        store = STORAGE[dtype] or model_dtype
        self.store_dtype = store
        on = {"device": self.device}
        # torch.empty: pages are only touched (and counted by the OS) once written.
        self.offload = None
        if offload_dir:
            if self.device.type != "cpu":
                raise ValueError(f"engine.kv_offload_dir: only a CPU pool is offloaded to a file, this one is on "
                                 f"{self.device}")
            block_bytes = block_size * kv_heads * head_dim * store.itemsize
            self.offload = Offload(offload_dir, layers, num_blocks, block_bytes)
            files, shape = self.offload.files, (slots, kv_heads, head_dim)
            self.k = [files.tensor(2 * i, shape, store) for i in range(layers)]
            self.v = [files.tensor(2 * i + 1, shape, store) for i in range(layers)]
        else:
            self.k = [torch.empty(slots, kv_heads, head_dim, dtype=store, **on) for _ in range(layers)]
            self.v = [torch.empty(slots, kv_heads, head_dim, dtype=store, **on) for _ in range(layers)]
            for t in self.k + self.v:
                _advise_huge_pages(t)
        if self.quantized:
            self.k_scale = [torch.ones(slots, kv_heads, 1, dtype=torch.float16, **on) for _ in range(layers)]
            self.v_scale = [torch.ones(slots, kv_heads, 1, dtype=torch.float16, **on) for _ in range(layers)]
        # block-sparse attention's block summaries: each block's elementwise min and max key
        self.summarised = summaries
        if summaries:
            self.k_min = [torch.full((num_blocks, kv_heads, head_dim), torch.inf, dtype=model_dtype, **on)
                          for _ in range(layers)]
            self.k_max = [torch.full((num_blocks, kv_heads, head_dim), -torch.inf, dtype=model_dtype, **on)
                          for _ in range(layers)]
            self.k_sum, self.v_sum = ([torch.zeros(num_blocks, kv_heads, head_dim, **on) for _ in range(layers)]
                                      for _ in range(2))
        empty = torch.empty(0, dtype=model_dtype, **on)
        self._bufs = [(empty, empty), (empty, empty)]  # gather's reused outputs, flat

    @property
    def bytes_per_token(self) -> int:
        """Stored bytes per token position over all layers, keys and values, scales included."""
        per = self.kv_heads * self.head_dim * self.store_dtype.itemsize
        if self.quantized:
            per += self.kv_heads * 2  # the fp16 scale
        return 2 * len(self.k) * per

    def write(self, layer: int, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """slots [N]; k, v [N, kv_heads, head_dim]."""
        if self.offload is not None:
            self.offload.touch(layer, torch.div(slots, self.block_size, rounding_mode="floor"), write=True)
        if self.quantized:
            (qk, sk), (qv, sv) = quantize(k), quantize(v)
            self.k[layer].index_copy_(0, slots, qk)
            self.v[layer].index_copy_(0, slots, qv)
            self.k_scale[layer].index_copy_(0, slots, sk)
            self.v_scale[layer].index_copy_(0, slots, sv)
            if self.summarised:  # the sums are of what is stored (as a fork's copy recomputes them)
                k, v = dequantize(qk, sk), dequantize(qv, sv)
        else:
            if k.dtype != self.store_dtype:  # 16-bit storage under a wider model: summaries of what is stored
                k, v = k.to(self.store_dtype), v.to(self.store_dtype)
            self.k[layer].index_copy_(0, slots, k)
            self.v[layer].index_copy_(0, slots, v)
            k, v = k.to(self.dtype), v.to(self.dtype)
        if self.summarised:
            self._summarise(layer, slots, k, v)

    def gather(self, layer: int, index: torch.Tensor, buffer: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        """index [M] slots -> k, v [M, kv_heads, head_dim] in the model's dtype, valid until the next gather
        into the same `buffer` (0 or 1: two gathers can be alive at once)."""
        if self.offload is not None:
            self.offload.prefetch(layer, torch.div(index, self.block_size, rounding_mode="floor"))
        scales = (self.k_scale[layer], self.v_scale[layer]) if self.quantized else None
        return self.gather_from(self.k[layer], self.v[layer], scales, index, buffer)

    def gather_from(self, k: torch.Tensor, v: torch.Tensor, scales: tuple[torch.Tensor, torch.Tensor] | None,
                    index: torch.Tensor, buffer: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        """`gather` from k, v [rows, heads, head_dim] (the pool's tensors of a layer, or a view of
        them, with their int8 `scales`): rows `index` [M] -> [M, heads, head_dim] in the model's
        dtype, in `buffer` (reused: on CPU a fresh large allocation page-faults on every call)."""
        m, heads = index.numel(), k.shape[1]
        need = m * heads * self.head_dim
        bk, bv = self._bufs[buffer]
        if bk.numel() < need:
            size = max(need, 2 * bk.numel())
            bk, bv = (torch.empty(size, dtype=self.dtype, device=self.device) for _ in range(2))
            self._bufs[buffer] = (bk, bv)
        bk, bv = (b[:need].view(m, heads, self.head_dim) for b in (bk, bv))
        if scales is None and k.dtype == self.dtype:
            torch.index_select(k, 0, index, out=bk)
            torch.index_select(v, 0, index, out=bv)
            return bk, bv
        if scales is None:  # 16-bit storage, widened as gathered
            bk.copy_(k.index_select(0, index))
            bv.copy_(v.index_select(0, index))
            return bk, bv
        dequantize(k.index_select(0, index), scales[0].index_select(0, index), out=bk)
        dequantize(v.index_select(0, index), scales[1].index_select(0, index), out=bv)
        return bk, bv

    def _summarise(self, layer: int, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """Fold the keys and values written into their blocks' min, max and sums; a block written
        at its first slot starts over (it was free, and may hold another sequence's summary)."""
        blocks = torch.div(slots, self.block_size, rounding_mode="floor")
        fresh = blocks[slots % self.block_size == 0]
        self.k_min[layer].index_fill_(0, fresh, torch.inf)
        self.k_max[layer].index_fill_(0, fresh, -torch.inf)
        self.k_sum[layer].index_fill_(0, fresh, 0.0)
        self.v_sum[layer].index_fill_(0, fresh, 0.0)
        index = blocks[:, None, None].expand_as(k)
        self.k_min[layer].scatter_reduce_(0, index, k, "amin")
        self.k_max[layer].scatter_reduce_(0, index, k, "amax")
        self.k_sum[layer].index_add_(0, blocks, k.float())
        self.v_sum[layer].index_add_(0, blocks, v.float())

    def copy_block(self, src: int, dst: int, count: int) -> None:
        """Copy the first `count` slots of block `src` into block `dst` in every layer (fork)."""
        bs = self.block_size
        a, b = slice(src * bs, src * bs + count), slice(dst * bs, dst * bs + count)
        if self.offload is not None:
            for layer in range(len(self.k)):
                self.offload.prefetch(layer, torch.tensor([src], device=self.device))
                self.offload.touch(layer, torch.tensor([dst], device=self.device), write=True)
        tensors = [self.k, self.v] + ([self.k_scale, self.v_scale] if self.quantized else [])
        if self.summarised:  # src's min and max cover the copied keys (and maybe more: a looser bound)
            for lo, hi in zip(self.k_min, self.k_max):
                lo[dst], hi[dst] = lo[src], hi[src]
        for per_layer in tensors:
            for t in per_layer:
                t[b] = t[a]
        if self.summarised:  # sums must be exact: of the copied slots only
            for layer in range(len(self.k)):
                k, v = self.k[layer][b].float(), self.v[layer][b].float()
                if self.quantized:
                    k, v = k * self.k_scale[layer][b], v * self.v_scale[layer][b]
                self.k_sum[layer][dst], self.v_sum[layer][dst] = k.sum(0), v.sum(0)

    def stored(self, layer: int, index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The keys and values of `layer` as stored (the whole tensors, for attention that reads
        the pool itself: `paged_decode`, `int8_attention`), after what a gather of `index` does
        first (an offloaded pool's prefetch)."""
        if self.offload is not None:
            self.offload.prefetch(layer, torch.div(index, self.block_size, rounding_mode="floor"))
        return self.k[layer], self.v[layer]

    def quantized_layer(self, layer: int, index: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """An int8 pool's keys, values and their scales in `layer` (`stored` and the scales)."""
        return *self.stored(layer, index), self.k_scale[layer], self.v_scale[layer]


class HeadsApart:
    """A pool seen as one of a single kv head, whose slot `slot * kv_heads + head` is head `head`
    of `slot`: for attention whose rows read a different set of slots through each kv head
    (block-sparse selection per kv head), through code written for one set per row (`stored`,
    `quantized_layer` and `gather` as `KVPool`'s, over the same memory, no copy)."""

    def __init__(self, pool: KVPool):
        self.pool, self.kv_heads, self.head_dim = pool, 1, pool.head_dim
        self.quantized, self.dtype, self.device = pool.quantized, pool.dtype, pool.device
        self.store_dtype = pool.store_dtype

    def _flat(self, t: torch.Tensor) -> torch.Tensor:
        return t.view(-1, 1, t.shape[-1])

    def _slots(self, index: torch.Tensor) -> torch.Tensor:
        """The pool's slots of these (only an offloaded pool looks at them: its prefetch)."""
        return index if self.pool.offload is None else torch.div(index, self.pool.kv_heads, rounding_mode="floor")

    def stored(self, layer: int, index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        k, v = self.pool.stored(layer, self._slots(index))
        return self._flat(k), self._flat(v)

    def quantized_layer(self, layer: int, index: torch.Tensor) -> tuple[torch.Tensor, ...]:
        k, v, ks, vs = self.pool.quantized_layer(layer, self._slots(index))
        return self._flat(k), self._flat(v), self._flat(ks), self._flat(vs)

    def gather(self, layer: int, index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """index [M] -> k, v [M, 1, head_dim] in the model's dtype, as `KVPool.gather` (its buffer 0)."""
        if not self.quantized:
            return self.pool.gather_from(*self.stored(layer, index), None, index)
        k, v, ks, vs = self.quantized_layer(layer, index)
        return self.pool.gather_from(k, v, (ks, vs), index)


HUGE_PAGE = 2 << 20
_MADV_HUGEPAGE = 14  # linux/mman.h


@functools.lru_cache(maxsize=1)
def _madvise():
    madvise = ctypes.CDLL(None, use_errno=True).madvise
    madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    return madvise


def _advise_huge_pages(t: torch.Tensor) -> None:
    """Ask Linux to back the 2 MiB-aligned part of CPU tensor `t`'s memory with transparent huge
    pages once it is touched. A hint: where the kernel has no THP or it is off, nothing changes.
    Untouched memory stays untouched; the pool hands out its lowest free blocks first, so what a
    pool holds in memory grows by at most one 2 MiB page per tensor beyond what it uses."""
    if sys.platform != "linux" or t.device.type != "cpu":
        return
    start = t.data_ptr()
    lo = -(-start // HUGE_PAGE) * HUGE_PAGE
    hi = (start + t.numel() * t.element_size()) // HUGE_PAGE * HUGE_PAGE
    if hi > lo:
        _madvise()(lo, hi - lo, _MADV_HUGEPAGE)
