"""`Layout`: a model's distinct tensors packed into a few flat buckets per dtype, computed the same
way on the trainer and on every engine replica, and a fingerprint that says two layouts agree.

A bucket is one contiguous tensor of one dtype, so a broadcast sends a whole bucket in one
collective instead of one per parameter; a bucket is closed when the next tensor would take it
past `bucket_bytes` (a tensor larger than that gets a bucket of its own). Tied tensors (a tied
lm_head, listed by state_dict under its own name too) are laid out once. This module allocates
and copies; it sends nothing.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Mapping

import torch


@dataclass(frozen=True)
class Slot:
    """Where one tensor lives: its bucket and its element range there."""

    name: str
    bucket: int
    offset: int  # in elements of the bucket's dtype
    shape: tuple[int, ...]
    dtype: torch.dtype

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    def describe(self) -> str:
        return f"{self.name} {list(self.shape)} {str(self.dtype).removeprefix('torch.')}"


class Layout:
    def __init__(self, state: Mapping[str, torch.Tensor], bucket_bytes: int):
        self.slots: list[Slot] = []
        self.buckets: list[tuple[torch.dtype, int]] = []  # (dtype, elements)
        open_bucket: dict[torch.dtype, int] = {}  # dtype -> index of its bucket still taking tensors
        for name, t in distinct(state).items():
            b = open_bucket.get(t.dtype)
            if b is not None and (self.buckets[b][1] + t.numel()) * t.element_size() > bucket_bytes:
                b = None
            if b is None:
                b = open_bucket[t.dtype] = len(self.buckets)
                self.buckets.append((t.dtype, 0))
            dtype, used = self.buckets[b]
            self.slots.append(Slot(name, b, used, tuple(t.shape), t.dtype))
            self.buckets[b] = (dtype, used + t.numel())
        self.description = [s.describe() for s in self.slots]
        digest = hashlib.sha256("\n".join(self.description + [str(bucket_bytes)]).encode()).hexdigest()
        self.fingerprint = digest[:16]
        self.nbytes = sum(n * torch.empty((), dtype=d).element_size() for d, n in self.buckets)

    @property
    def fingerprint_int(self) -> int:
        """The fingerprint as a non-negative int64, for a header tensor."""
        return int(self.fingerprint[:15], 16)

    @property
    def numel(self) -> int:
        return sum(n for _, n in self.buckets)

    def allocate(self, device: torch.device) -> list[torch.Tensor]:
        return [torch.empty(n, dtype=d, device=device) for d, n in self.buckets]

    def views(self, buffers: list[torch.Tensor]) -> dict[str, torch.Tensor]:
        """name -> that tensor's view into `buffers` (no copy)."""
        return {s.name: buffers[s.bucket][s.offset:s.offset + s.numel].view(s.shape) for s in self.slots}

    @torch.no_grad()
    def pack(self, state: Mapping[str, torch.Tensor], buffers: list[torch.Tensor]) -> None:
        """Copy `state`'s tensors into `buffers`; a tensor that does not fit its slot is an error."""
        for slot, view in zip(self.slots, self.views(buffers).values()):
            t = state.get(slot.name)
            if t is None or tuple(t.shape) != slot.shape or t.dtype != slot.dtype:
                got = "missing" if t is None else f"{list(t.shape)} {str(t.dtype).removeprefix('torch.')}"
                raise ValueError(f"weight sync: the published model's {slot.name} is {got}, "
                                 f"but the group was formed for {slot.describe()}")
            view.copy_(t)

    def difference(self, other: list[str], mine: str, theirs: str) -> str:
        """Where `other` (another layout's description) first differs from this one, in words
        naming this side `mine` and the other `theirs`."""
        for a, b in zip(self.description, other):
            if a != b:
                return f"{theirs} has {b!r} where {mine} has {a!r}"
        if len(self.description) != len(other):
            return f"{theirs} has {len(other)} tensors, {mine} {len(self.description)}"
        return f"{theirs} was given another bucket size than {mine}"


def distinct(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """`state` without the entries that share storage with an earlier one (tied weights)."""
    seen, out = set(), {}
    for name, tensor in state.items():
        if tensor.data_ptr() not in seen:
            seen.add(tensor.data_ptr())
            out[name] = tensor
    return out
