"""`LLM`: the engine's front, with vLLM's names.

`generate(prompts, params)` adds requests and steps until they finish. `add_request`, `step` and
`abort` are the same loop taken apart, for the server and the agent loop: `step` returns the
outputs of unfinished requests too (the contract is in outputs.py), `abort` returns what a
request produced so far, and `add_request(..., resume=outputs)` continues it later, possibly
under new weights. A step schedules (scheduler.py), runs the model and samples
(model_runner.py), tells the scheduler what was computed, and then decides here which sequences
are finished (EOS, stop tokens and strings, length) and builds the outputs.
`load_weights(state, version)` swaps the policy in place and is the only way the version
changes: no KV computed under an older version is reused afterwards (running sequences are
recomputed, the prefix cache is salted by version), and the tokens they already have keep their
versions (partial rollouts). To let in-flight requests finish under the weights they started
with instead, the caller holds admission (`hold_admission`), keeps stepping until `in_flight`
is 0, then loads; the load ends the hold. When to load is the caller's choice
(`weights.EngineSync`), not the engine's.
"""

from __future__ import annotations

import copy
import itertools
import logging
import time
import warnings
from dataclasses import fields, replace
from typing import Mapping, Sequence as Seq

import torch

from tempering.errors import UserError
from tempering.config import EngineConfig
from tempering.engine.block_manager import BlockManager
from tempering.engine.cpu.int8_weights import Int8Weights
from tempering.engine.kv_cache import KVPool
from tempering.engine.kv_swap import SwapSpace
from tempering.engine.kv_usage import KVUsage, kv_usage
from tempering.engine.sparse import SparseSpec
from tempering.engine.model_runner import ModelRunner
from tempering.engine.outputs import CompletionOutput, RequestOutput
from tempering.engine.plan import AttentionPlan, choose_plan
from tempering.engine.sampling_params import SamplingParams, final_text, hit_stop
from tempering.engine.scheduler import Scheduler, SchedulerOutput
from tempering.engine.sequence import Request, Sequence, Status
from tempering.models import Decoder

_CONFIG_NAMES = {f.name for f in fields(EngineConfig)}
log = logging.getLogger(__name__)


def torch_dtype(dtype: str) -> torch.dtype | None:
    """`engine.dtype` as a torch dtype; None for "auto" (the model's own)."""
    return None if dtype == "auto" else getattr(torch, dtype)


def _in_dtype(model: Decoder, dtype: str) -> Decoder:
    """The model in `engine.dtype`: itself where it already is ("auto": always), else a cast
    copy (the caller's model, e.g. a trainer's, is left as it is)."""
    want = torch_dtype(dtype)
    if want is not None and next(model.parameters()).device.type == "cpu":
        _warn_if_slow_on_this_cpu(want)
    if want is None or next(model.parameters()).dtype == want:
        return model
    return copy.deepcopy(model).to(want)


def _warn_if_slow_on_this_cpu(dtype: torch.dtype) -> None:
    """16-bit weights pay on a CPU only with matrix units for them (AMX; AVX512-BF16 for bf16):
    without, PyTorch widens them per matmul (measured on an AVX2 machine: bench/engine.py's c
    case 70 s in bfloat16 against 14 s in float32). Say so once, rather than run slowly."""
    units = {torch.bfloat16: torch.cpu._is_amx_tile_supported() or torch.cpu._is_avx512_bf16_supported(),
             torch.float16: torch.cpu._is_amx_fp16_supported()}
    if not units.get(dtype, True):
        warnings.warn(f"engine.dtype = {str(dtype).removeprefix('torch.')}: this CPU "
                      f"({torch.backends.cpu.get_cpu_capability()}) has no matrix units for it, so the engine's "
                      f"linear layers run several times slower than in float32", RuntimeWarning, stacklevel=3)


class LLM:
    def __init__(self, model: Decoder, tokenizer=None, config: EngineConfig | None = None,
                 eos_token_ids: Seq[int] = (), *, version: int = 0, plan: AttentionPlan | None = None, **overrides):
        """`version`: the policy version of the model's weights (the rollout worker starts at -1,
        below any published version, so the first `WeightStore.pull` loads). `plan`: the attention
        and sampling paths (default: `choose_plan`'s for this config and machine; tests force
        one). `overrides` are EngineConfig fields, e.g. LLM(model, max_seq_len=256)."""
        unknown = sorted(set(overrides) - _CONFIG_NAMES)
        if unknown:
            raise ValueError(f"LLM: unknown engine options {unknown} (known: {sorted(_CONFIG_NAMES)})")
        cfg = replace(config or EngineConfig(), **overrides)
        if cfg.max_batched_tokens < cfg.max_batch_size:
            raise ValueError(f"LLM: max_batched_tokens ({cfg.max_batched_tokens}) must be >= max_batch_size "
                             f"({cfg.max_batch_size}) so every running sequence can decode each step")
        model = _in_dtype(model, cfg.dtype)
        self.cfg, self.model, self.tokenizer = cfg, model.eval(), tokenizer
        # engine.weights = "int8": weights load into `model`; the steps run on its int8 copy
        self.int8 = Int8Weights(model) if cfg.weights == "int8" else None
        eos = list(eos_token_ids) or ([tokenizer.eos_id] if tokenizer is not None else [])
        self.eos_token_ids = frozenset(eos)
        arch = model.arch
        num_blocks = self._num_blocks()
        weight = next(model.parameters())
        bad = [layer for layer in cfg.sparse_layers if layer >= arch.num_hidden_layers]
        if bad:
            raise ValueError(f"LLM: sparse_layers {bad} are not layers of a {arch.num_hidden_layers}-layer model")
        sparse = (SparseSpec(cfg.sparse_topk, cfg.sparse_sink_blocks, cfg.sparse_local_blocks, cfg.sparse_rest_group)
                  if cfg.sparse_topk else None)
        self.pool = KVPool(arch.num_hidden_layers, num_blocks, cfg.block_size, arch.num_key_value_heads,
                           arch.head_dim, cfg.kv_dtype, weight.device, weight.dtype, summaries=sparse is not None,
                           offload_dir=cfg.kv_offload_dir or None)
        self.blocks = BlockManager(num_blocks, cfg.block_size, cfg.prefix_cache, cfg.sliding_window,
                                   cfg.attention_sinks)
        swap = SwapSpace(self.pool, cfg.swap_blocks) if cfg.swap_blocks else None
        self.scheduler = Scheduler(self.blocks, cfg.max_batch_size, cfg.max_batched_tokens, swap)
        if plan is None:
            prefill = "sdpa" if cfg.attention == "sdpa" else "compiled flex" if cfg.compile_flex else "flex"
            plan = choose_plan(self.pool, sparse is not None, cfg.sliding_window, prefill)
        else:
            plan = replace(plan, why=())  # the caller's choice: not for the reasons a chosen plan had
        plan.check(self.pool)
        self.plan = plan
        log.info("attention plan: %s", plan.describe())
        self.runner = ModelRunner(self.int8.model if self.int8 else model, self.pool, plan, cfg.sliding_window,
                                  cfg.attention_sinks, sparse,
                                  frozenset(cfg.sparse_layers or range(arch.num_hidden_layers)))
        self.requests: dict[int, Request] = {}
        self._ids = itertools.count()
        self._version = version
        # prompt_tokens: of the requests; computed_tokens: prompt (and recomputed) tokens that ran
        # through the model, the rest came from the prefix cache or a fork; *_slot_steps: KV slots
        # held by running sequences and how many of them were empty, summed over steps.
        self.stats = {"prompt_tokens": 0, "computed_tokens": 0, "generated_tokens": 0, "steps": 0,
                      "seconds": 0.0, "allocated_slot_steps": 0, "unused_slot_steps": 0, "peak_blocks": 0}

    def _num_blocks(self) -> int:
        c = self.cfg
        if c.kv_blocks:
            return c.kv_blocks
        per_seq = c.max_seq_len
        if c.sliding_window:  # sinks + window + one chunk in flight bound what a sequence holds
            per_seq = min(per_seq, c.attention_sinks + c.sliding_window + c.max_batched_tokens + 2 * c.block_size)
        return c.max_batch_size * -(-per_seq // c.block_size) + 1

    # -- weights and versions -----------------------------------------------------------------
    @property
    def version(self) -> int:
        """The policy version of the weights; every generated token records it."""
        return self._version

    @torch.no_grad()
    def load_weights(self, state: Mapping[str, torch.Tensor], version: int) -> None:
        """Copy `state` (names as in the decoder's state_dict) into the engine's model, cast to its
        dtype. No KV of the old policy is used again: running and swapped sequences are recomputed,
        the prefix cache is emptied (also when only the version number changes: the version is the
        cache's salt)."""
        own = self.model.state_dict()
        unknown = sorted(set(state) - set(own))
        if unknown:
            raise ValueError(f"load_weights: unknown tensors {unknown[:5]}")
        assert not (self.scheduler.hold and self.in_flight), "load_weights while a hold drains requests in flight"
        for name, tensor in state.items():
            own[name].copy_(tensor)
        if self.int8 is not None:
            self.int8.refresh()
        self.scheduler.preempt_all()
        self.blocks.clear_cache()
        self._version = version
        self.scheduler.hold = False

    def hold_admission(self) -> None:
        """Admit no sequence that has not started until the next `load_weights`; those in flight
        (forks and sequences preempted for memory included) run to their end under these weights."""
        self.scheduler.hold = True

    @property
    def in_flight(self) -> int:
        """Sequences started and not finished; under a hold, new weights can load when it is 0."""
        return self.scheduler.in_flight

    # -- requests -------------------------------------------------------------------------------
    def generate(self, prompts: Seq[str] | Seq[Seq[int]],
                 params: SamplingParams | Seq[SamplingParams] = SamplingParams()) -> list[RequestOutput]:
        """Text prompts are encoded as vLLM encodes them, the tokenizer's BOS included
        (`Tokenizer.encode_prompt`); token-id prompts are taken as they are."""
        plist = list(params) if isinstance(params, (list, tuple)) else [params] * len(prompts)
        if len(plist) != len(prompts):
            raise ValueError(f"generate: {len(prompts)} prompts but {len(plist)} SamplingParams")
        if self.scheduler.hold:  # nothing would run after the requests in flight: a hang, not an answer
            raise RuntimeError("generate: admission is held for a weight load; call load_weights first")
        ids = [self.check(p, sp) for p, sp in zip(prompts, plist)]  # all validated before any is queued
        return run_until_finished(self, [self._queue(i, p, final_only=True) for i, p in zip(ids, plist)])

    def add_request(self, prompt: str | Seq[int], params: SamplingParams = SamplingParams(),
                    resume: Seq[CompletionOutput] = ()) -> int:
        """Queue one request; `resume` (the n outputs of an aborted request) continues them."""
        ids = self.check(prompt, params)
        if resume and len(resume) != params.n:
            raise ValueError(f"add_request: resume has {len(resume)} outputs but params.n is {params.n}")
        return self._queue(ids, params, resume)

    def _queue(self, ids: list[int], params: SamplingParams, resume: Seq[CompletionOutput] = (),
               final_only: bool = False) -> int:
        """add_request for token ids that `check` accepted."""
        rid = next(self._ids)
        seqs = [Sequence(rid, i, list(ids), len(ids), params, _generator(params, i)) for i in range(params.n)]
        for seq, prior in zip(seqs, resume):
            seq.tokens += prior.token_ids
            seq.logprobs, seq.versions = list(prior.logprobs), list(prior.versions)
            reason = resumed_finish(prior, len(seq.tokens) >= seq.max_len)
            if reason is not None:
                seq.status, seq.finish_reason, seq.text = Status.FINISHED, reason, self._text(seq)
        self.requests[rid] = Request(rid, list(ids), seqs, final_only)
        self.stats["prompt_tokens"] += len(ids)
        live = [s for s in seqs if s.status is not Status.FINISHED]
        if params.n > 1 and not resume:
            self.scheduler.add(live[0], forks=live[1:])  # they fork once it has computed the prompt
        else:
            for s in live:
                self.scheduler.add(s)
        return rid

    def abort(self, request_id: int) -> RequestOutput:
        """Stop a request now. -> what it generated so far (finish_reason "abort")."""
        req = self.requests.pop(request_id, None)
        if req is None:
            raise ValueError(f"abort: no unfinished request {request_id}")
        for seq in req.seqs:
            if seq.status is not Status.FINISHED:
                self.scheduler.finish(seq)
                seq.finish_reason, seq.text = "abort", self._text(seq)
        return self._output(req, finished=True)

    def kv_usage(self) -> KVUsage:
        """The KV bytes the engine holds, where and why (`kv_usage`)."""
        return kv_usage(self.pool, self.blocks, self.scheduler.swap)

    def has_unfinished(self) -> bool:
        return bool(self.requests)

    # -- the loop -------------------------------------------------------------------------------
    def step(self) -> list[RequestOutput]:
        """One engine step. -> an output for each request that got a token in it (outputs.py).
        Under a hold with nothing in flight there is nothing to run until `load_weights`: -> []."""
        if not self.requests:
            return []
        start = time.perf_counter()
        scheduled = self.scheduler.schedule(self._version)
        if not scheduled.items:
            if self.scheduler.hold and not self.in_flight:
                return []
            raise RuntimeError("engine: requests are unfinished but nothing could be scheduled "
                               f"({self.blocks.num_available} free KV blocks)")
        tokens, logprobs = self.runner.run(scheduled)
        if self.pool.offload is not None:
            self.pool.offload.evict()
        self.scheduler.update(scheduled, self._version)
        self._account(scheduled)
        outputs = self._postprocess([s for s, _ in scheduled.sampled], tokens, logprobs)
        self.stats["seconds"] += time.perf_counter() - start
        return outputs

    def _postprocess(self, seqs: list[Sequence], tokens: list[int], logprobs: list[float]) -> list[RequestOutput]:
        """Record the sampled tokens, finish the sequences that are done. -> the step's outputs."""
        touched: dict[int, None] = {}  # request ids in order of first appearance
        for seq, t, lp in zip(seqs, tokens, logprobs):
            touched[seq.request_id] = None
            if self._append(seq, t, lp):
                self.scheduler.finish(seq)
                seq.text = self._text(seq)
        outputs = []
        for rid in touched:
            req = self.requests[rid]
            if req.finished:
                del self.requests[rid]
                outputs.append(self._output(req, finished=True))
            elif not req.final_only:
                outputs.append(self._output(req, finished=False))
        return outputs

    def _append(self, s: Sequence, token: int, logprob: float) -> bool:
        """Record one token; True when the sequence is finished."""
        s.tokens.append(token)
        s.logprobs.append(logprob)
        s.versions.append(self._version)
        p = s.params
        if (token in self.eos_token_ids and not p.ignore_eos) or token in p.stop_token_ids:
            s.finish_reason = "stop"
        elif p.stop and self.tokenizer is not None and hit_stop(self.tokenizer, s.output_ids, p.stop):
            s.finish_reason = "stop"
        elif len(s.tokens) >= s.max_len:
            s.finish_reason = "length"
        return s.finish_reason is not None

    def _account(self, scheduled: SchedulerOutput) -> None:
        bs, used, s = self.cfg.block_size, self.blocks.num_used, self.stats
        s["steps"] += 1
        s["generated_tokens"] += len(scheduled.sampled)
        s["computed_tokens"] += sum(c for q, c in scheduled.items if c > 1 or q.num_computed <= q.num_prompt)
        s["allocated_slot_steps"] += used * bs
        s["unused_slot_steps"] += sum(-q.num_computed % bs for q in self.scheduler.running
                                      if q.status is Status.RUNNING)
        s["peak_blocks"] = max(s["peak_blocks"], used)

    # -- helpers --------------------------------------------------------------------------------
    def check(self, prompt: str | Seq[int], p: SamplingParams) -> list[int]:
        """Encode and validate a request without queuing it (safe from any thread). -> token ids"""
        ids = encode_request(prompt, p, self.tokenizer, self.model.arch.vocab_size, self.cfg.max_seq_len)
        context = self.model.arch.max_position_embeddings
        if not self.cfg.sliding_window and len(ids) + p.max_tokens > context:
            # Positions past the model's trained context produce garbage, not an error: refuse.
            raise UserError(f"generate: prompt of {len(ids)} tokens + max_tokens {p.max_tokens} exceeds the "
                             f"model's max_position_embeddings {context}")
        if not self.cfg.sliding_window and self.blocks.blocks_for(len(ids) + p.max_tokens) > self.blocks.num_blocks:
            raise UserError(f"generate: a sequence of {len(ids) + p.max_tokens} tokens needs more KV blocks "
                             f"than engine.kv_blocks = {self.blocks.num_blocks}")
        return ids

    @staticmethod
    def _output(req: Request, finished: bool) -> RequestOutput:
        # Copies: the engine keeps appending to the sequences' lists after handing this out.
        outs = [CompletionOutput(s.index, s.output_ids, list(s.logprobs), list(s.versions), s.text, s.finish_reason)
                for s in req.seqs]
        return RequestOutput(req.request_id, req.prompt, outs, finished)

    def _text(self, s: Sequence) -> str:
        return final_text(self.tokenizer, s.output_ids, s.params.stop)


def resumed_finish(prior: CompletionOutput, full: bool) -> str | None:
    """How a resumed sample is already finished: as it ended ("stop", "length"), or "length" when
    it is `full` (no token left to generate); None when it goes on."""
    if prior.finish_reason in ("stop", "length"):
        return prior.finish_reason
    return "length" if full else None


def run_until_finished(engine, rids: list[int]) -> list[RequestOutput]:
    """Step `engine` until the requests `rids` have finished. -> their final outputs, in order."""
    done: dict[int, RequestOutput] = {}
    while len(done) < len(rids):
        for out in engine.step():
            if out.finished:
                done[out.request_id] = out
    return [done[r] for r in rids]


def encode_request(prompt: str | Seq[int], p: SamplingParams, tokenizer, vocab: int, max_seq_len: int) -> list[int]:
    """A request's token ids, checked against the vocabulary and the engine's sequence length.
    Text is encoded as vLLM encodes it, the tokenizer's BOS included (`encode_prompt`)."""
    if isinstance(prompt, str):
        if tokenizer is None:
            raise UserError("generate: text prompts need a tokenizer; pass token ids instead")
        ids = tokenizer.encode_prompt(prompt)
    else:
        ids = [int(t) for t in prompt]
    if not ids:
        raise UserError("generate: empty prompt")
    if min(ids) < 0 or max(ids) >= vocab:
        raise UserError(f"generate: token ids must be in [0, {vocab}), got {min(ids)}..{max(ids)}")
    if len(ids) + p.max_tokens > max_seq_len:
        raise UserError(f"generate: prompt of {len(ids)} tokens + max_tokens {p.max_tokens} "
                        f"exceeds engine.max_seq_len {max_seq_len}")
    return ids


def _generator(p: SamplingParams, index: int) -> torch.Generator | None:
    return None if p.seed is None else torch.Generator().manual_seed(p.seed + index)
