"""`AttentionPlan`: which attention, prefill and sampling paths an engine runs, chosen once.

`choose_plan(pool, ...)` picks each path from the engine's config (KV dtype, sliding window,
sparse layers, `engine.attention`) and what this machine has (the C kernels built, SDPA's CPU
kernel with a log-sum-exp, the pool's device, dtype and head dim), with the reason for each;
`LLM` logs it once and hands it to the model runner, which passes it to attention, `sparse` and
the sampler. A test builds a plan (`dataclasses.replace` of a chosen one) to force a path;
`check` refuses one the pool cannot run. It runs nothing itself, and leaves the choices that
depend on one call's size (int8 reads under `int8_attention.MIN_KEYS`, a row's truncation) to
the code that runs it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Callable, Literal

from tempering.engine.cpu import paged_decode, sampler, sparse_decode
from tempering.engine.int8_attention import MIN_KEYS, Mode as Int8Mode
from tempering.engine.kv_cache import KVPool
from tempering.engine.partial_attention import has_flash_with_lse

Prefill = Literal["sdpa", "flex", "compiled flex"]


@dataclass(frozen=True)
class AttentionPlan:
    paged_decode: bool  # decode rows read straight from the pool by cpu/paged_decode's C kernel
    sparse_decode: bool  # block-sparse decode rows planned in C (cpu/sparse_decode), read by that kernel
    # reads of an int8 pool that attend over it as stored (int8_attention): "auto" = decode-shaped
    # reads of at least MIN_KEYS keys, where it measured faster; "always"; "never" = dequantize + SDPA
    int8_attention: Int8Mode
    flash_lse: bool  # SDPA's CPU kernel with its log-sum-exp merges block-sparse rows with their group means
    cascade: bool  # decode rows that share a prefix read it once for their group (needs flash_lse)
    prefill: Prefill  # masked prefill chunks: SDPA, or block-sparse flex_attention (compiled or eager)
    native_sampler: bool  # untruncated float32 rows drawn by cpu/sampler's C kernel
    why: tuple[str, ...] = field(default=(), compare=False)  # a reason per path above, for the log

    def describe(self) -> str:
        """One line: each path chosen, and why where the plan was chosen here."""
        paths = [f for f in fields(self) if f.name != "why"]
        values = [str(getattr(self, f.name)).lower() for f in paths]
        if not self.why:
            return "given: " + ", ".join(f"{f.name}={v}" for f, v in zip(paths, values))
        return ", ".join(f"{f.name}={v} ({why})" for f, v, why in zip(paths, values, self.why))

    def check(self, pool: KVPool) -> None:
        """Raise ValueError where a path this plan takes cannot run on `pool` here."""
        needs = [("paged_decode", self.paged_decode, paged_decode.misfit(pool) or _unbuilt(paged_decode.built)),
                 ("sparse_decode", self.sparse_decode, None if self.paged_decode else "paged_decode is off"),
                 ("sparse_decode", self.sparse_decode, sparse_decode.misfit(pool) or _unbuilt(sparse_decode.built)),
                 ("int8_attention", self.int8_attention != "never", None if pool.quantized else "not an int8 pool"),
                 ("flash_lse", self.flash_lse, _no_flash(pool)), ("cascade", self.cascade, _no_flash(pool)),
                 ("native_sampler", self.native_sampler, _not_cpu(pool) or _unbuilt(sampler.built))]
        for name, taken, why_not in needs:
            if taken and why_not:
                raise ValueError(f"AttentionPlan.{name}: cannot run here: {why_not}")


def choose_plan(pool: KVPool, sparse: bool = False, window: int = 0, prefill: Prefill = "sdpa") -> AttentionPlan:
    """The fastest paths that run on `pool` here, for an engine with block-sparse layers
    (`sparse`) or a sliding `window` (> 0), and its prefill path (`engine.attention`)."""
    stored = "int8" if pool.quantized else str(pool.store_dtype).removeprefix("torch.")
    no_paged = paged_decode.misfit(pool) or _unbuilt(paged_decode.built)
    no_sparse = ("a dense engine" if not sparse else "paged_decode is off" if no_paged
                 else sparse_decode.misfit(pool) or _unbuilt(sparse_decode.built))
    no_flash = _no_flash(pool)
    no_cascade = "flash_lse is off" if no_flash else "a sliding window" if window else None
    no_native = _not_cpu(pool) or _unbuilt(sampler.built)
    chosen = {  # each path's value and why, in the order of the fields
        "paged_decode": (not no_paged, no_paged or f"C kernel built, a cpu {stored} pool, head dim {pool.head_dim}"),
        "sparse_decode": (not no_sparse, no_sparse or "C kernel built"),
        "int8_attention": ("auto", f"int8 pool: decode reads of >= {MIN_KEYS} keys") if pool.quantized
        else ("never", f"a {stored} pool"),
        "flash_lse": (not no_flash, no_flash or "a cpu pool, this torch has it"),
        "cascade": (not no_cascade, no_cascade or "flash_lse on, no sliding window"),
        "prefill": (prefill, "engine.attention"),
        "native_sampler": (not no_native, no_native or "C kernel built, a cpu pool"),
    }
    return AttentionPlan(**{name: value for name, (value, _) in chosen.items()},
                         why=tuple(why for _, why in chosen.values()))


def _not_cpu(pool: KVPool) -> str | None:
    return None if pool.device.type == "cpu" else f"a {pool.device.type} pool"


def _unbuilt(built: Callable[[], bool]) -> str | None:
    """None where a C kernel is built here (`built` builds it on its first call), else why not."""
    return None if built() else "its C kernel could not be built here (warned)"


def _no_flash(pool: KVPool) -> str | None:
    return _not_cpu(pool) or (None if has_flash_with_lse() else "this torch has no SDPA kernel with log-sum-exp")
