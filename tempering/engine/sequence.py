"""`Sequence`: one sample of one request as the engine sees it, and `Request`, the n of them.

A sequence owns its tokens (prompt, then generated), the logprob and policy version of every
generated token, how many of its tokens already have KV in the cache (`num_computed`), its
block table and, once finished, its text. It does not allocate blocks or run the model: the
block manager and the scheduler do that by reading and updating these fields.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

import torch

from tempering.engine.sampling_params import SamplingParams

DROPPED = -1  # block-table entry of a block freed because it slid out of the attention window


class Status(enum.Enum):
    WAITING = "waiting"  # needs (re)computing from num_computed; not in the batch
    FORK_PENDING = "fork_pending"  # a sibling waiting for sample 0 to finish the shared prompt
    RUNNING = "running"
    SWAPPED = "swapped"  # preempted with its KV in the swap space (swap_table); not in the batch
    FINISHED = "finished"


@dataclass(eq=False)
class Sequence:
    request_id: int
    index: int  # sample index within the request
    tokens: list[int]  # prompt (+ output tokens carried over by resume) + generated
    num_prompt: int  # tokens[:num_prompt] is the prompt
    params: SamplingParams
    generator: torch.Generator | None = None
    logprobs: list[float] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    status: Status = Status.WAITING
    finish_reason: str | None = None  # "stop" | "length" | "abort" once finished
    text: str = ""  # decoded once, when it finishes (stop strings cut)
    num_computed: int = 0  # tokens whose KV is in the cache
    block_table: list[int] = field(default_factory=list)
    block_hashes: list[bytes] = field(default_factory=list)  # chained hashes of full blocks
    num_registered: int = 0  # leading blocks already offered to the prefix cache
    hash_version: int | None = None  # the policy version block_hashes were salted with
    num_dropped: int = 0  # leading blocks freed by the sliding window (sinks excepted)
    swap_table: list[int] = field(default_factory=list)  # swap-space blocks holding its KV while SWAPPED

    @property
    def max_len(self) -> int:
        """Stop with "length" once len(tokens) reaches this."""
        return self.num_prompt + self.params.max_tokens

    @property
    def output_ids(self) -> list[int]:
        return self.tokens[self.num_prompt:]

    @property
    def pending(self) -> int:
        """Tokens still to run through the model before the next one can be sampled."""
        return len(self.tokens) - self.num_computed


@dataclass(eq=False)
class Request:
    request_id: int
    prompt: list[int]
    seqs: list[Sequence]
    final_only: bool = False  # `step` reports it only when it finishes (vLLM's FINAL_ONLY, for `generate`)

    @property
    def finished(self) -> bool:
        return all(s.status is Status.FINISHED for s in self.seqs)
