"""Reward-model and judge throughput. Prints one JSON object.

Reward model (`RewardModelWorker`, its own process, `--threads` torch threads, cache OFF so that
every text runs): a random-init classifier (`--hidden`, `--layers`; a character tokenizer, so a
text of n characters is n tokens) scores `--texts` texts of `--min-tokens`..`--max-tokens`
tokens (uniform), each sent alone by one of `--callers` threads (each takes the next text when
its previous one is answered, as the rollout's scoring threads do). Timed from the first request
to the last answer, after a warm-up request; the worker's start is not timed.

- `rm_batched_samples_per_s`: dynamic batching on (`--max-batch-tokens`, `--max-wait-ms`).
- `rm_single_samples_per_s`, the baseline: the same callers, the same worker settings except
  `max_batch_tokens = 1`, so every gather ends at its first request and every forward pass runs
  one text (the worker is never idle: the other callers' requests are queued). This isolates
  what batching adds; `rm_batching_speedup` is batched / single.
- `rm_batched_wait0_samples_per_s`: batching with `max_wait_ms = 0`: each gather takes what is
  queued (the requests that arrived during the previous forward pass) and waits for nothing.
- `rm_one_caller_samples_per_s`: one caller, one text at a time, `max_wait_ms = 0` (the latency-
  bound case: the worker idles while each answer travels back).
- `*_tokens_per_cpu_s`: real tokens (no padding) per CPU-second of the worker process and this
  process together over the timed window (`/proc/<pid>/stat` and `getrusage`).

Judge: `tempering serve` (a subprocess, `--serve-threads` torch threads) serves a random-init
`--judge-hidden` x 2-layer causal LM with a character tokenizer (no chat template: the server
renders the messages as a plain transcript, about 1,500 tokens per request); `tempering.reward.
judge.Judge` (max_in_flight `--judge-in-flight`, max_tokens `--judge-max-tokens`, retries 0, cache
off) sends `--judge-requests` distinct items at once, after one warm-up request.
`judge_requests_per_s` counts requests answered (an HTTP 200 with a reply) per second, whether or
not the reply parses: a random model's reply does not contain a SCORE line, so `judge_parsed`
(replies that parsed) is reported separately and is expected to be 0.

On a CPU the forward passes are compute-bound once texts have tens of tokens: batching saves the
per-call overhead (Python, kernel launches, the round trip to the worker), not arithmetic, so the
speedup is large for small models and short texts and near 1 for long ones; run it with other
`--hidden/--layers/--min-tokens/--max-tokens` to see both.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import string
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import torch

from tempering.config import JudgeConfig, RewardModelConfig
from tempering.models import Arch, build_classifier, build_model, save_classifier, save_hf
from tempering.reward.judge import Judge
from tempering.reward.rm_worker import RewardModelWorker
from tempering.verdict import JudgeItem
from tempering.tokenizer import char_tokenizer

ALPHABET = string.ascii_lowercase + " "


def arch(vocab: int, hidden: int, layers: int, context: int, pad: int | None) -> Arch:
    heads = max(hidden // 64, 2)
    return Arch(vocab_size=vocab, hidden_size=hidden, intermediate_size=hidden * 11 // 4, num_hidden_layers=layers,
                num_attention_heads=heads, num_key_value_heads=max(heads // 2, 1), max_position_embeddings=context,
                pad_token_id=pad)


def rm_folder(root: Path, args: argparse.Namespace) -> Path:
    tok = char_tokenizer(ALPHABET)
    folder = root / "rm"
    save_classifier(build_classifier(arch(tok.vocab_size, args.hidden, args.layers, args.max_tokens + 8, tok.pad_id),
                                     1, seed=0), folder)
    tok.save(folder)
    return folder


def cpu_seconds(pid: int) -> float:
    """User + system CPU of process `pid` (the worker) and of this process."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    worker = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    me = resource.getrusage(resource.RUSAGE_SELF)
    return worker + me.ru_utime + me.ru_stime


def run_rm(folder: Path, texts: list[str], callers: int, args: argparse.Namespace, max_batch_tokens: int,
           max_wait_ms: float, per_request: int = 1) -> dict:
    cfg = RewardModelConfig(path=str(folder), max_batch_tokens=max_batch_tokens, max_wait_ms=max_wait_ms,
                            cache_size=0, threads=args.threads, timeout_s=600)
    with RewardModelWorker(cfg, "bench") as worker:
        worker.score(["warm up " * 4])
        before = worker.stats()
        cursor = iter(range(0, len(texts), per_request))
        lock = threading.Lock()

        def call() -> None:
            while True:
                with lock:
                    i = next(cursor, None)
                if i is None:
                    return
                worker.score(texts[i: i + per_request])

        threads = [threading.Thread(target=call) for _ in range(callers)]
        cpu, start = cpu_seconds(worker.pid), time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        seconds, cpu = time.perf_counter() - start, cpu_seconds(worker.pid) - cpu
        after = worker.stats()
    tokens = after["tokens"] - before["tokens"]
    batches = after["batches"] - before["batches"]
    return {"samples_per_s": len(texts) / seconds, "tokens_per_cpu_s": tokens / cpu, "seconds": seconds,
            "cpu_s": cpu, "forward_s": after["forward_s"] - before["forward_s"], "batches": batches,
            "requests_per_gather": -(-len(texts) // per_request) / (after["gathers"] - before["gathers"]),
            "texts_per_batch": (after["misses"] - before["misses"]) / batches,
            "padding": 1 - tokens / (after["padded_tokens"] - before["padded_tokens"])}


def judge_folder(root: Path, hidden: int) -> Path:
    tok = char_tokenizer(string.printable)
    folder = root / "judge"
    save_hf(build_model(arch(tok.vocab_size, hidden, 2, 2048, tok.pad_id), seed=0), folder)
    tok.save(folder)
    return folder


def run_judge(folder: Path, args: argparse.Namespace) -> dict:
    cmd = [sys.executable, "-c", "import sys; from tempering.cli import main; sys.exit(main())", "serve", str(folder),
           "--port", "0", "--name", "judge", "--threads", str(args.serve_threads), "--engine.max_seq_len=2048",
           "--engine.max_batch_size=32", "--engine.max_batched_tokens=2048"]
    server = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    try:
        line = server.stdout.readline()  # "[tempering] serving judge on http://127.0.0.1:PORT/v1"
        if "serving" not in line:
            raise RuntimeError(f"tempering serve did not start (exit code {server.wait(10)})")
        base_url = line.split(" on ", 1)[1].strip()
        threading.Thread(target=server.stdout.read, daemon=True).start()  # a full pipe would block the server
        cfg = JudgeConfig(base_url=base_url, model="judge", max_in_flight=args.judge_in_flight,
                          max_tokens=args.judge_max_tokens, retries=0, cache_size=0, timeout_s=300)
        rng = random.Random(1)
        items = [JudgeItem(prompt=f"sort {rng.randrange(10**6)}=", answer=str(rng.randrange(10**6)),
                           reference=str(rng.randrange(10**6))) for _ in range(args.judge_requests + 1)]
        with Judge(cfg) as judge:
            judge.judge(items[:1])  # warm-up
            start = time.perf_counter()
            results = judge.judge(items[1:])
            seconds = time.perf_counter() - start
    finally:
        server.terminate()
        server.wait(10)
    answered = [r for r in results if r.ok or r.error.kind == "parse"]
    return {"judge_requests_per_s": len(answered) / seconds, "judge_requests": len(results),
            "judge_answered": len(answered), "judge_parsed": sum(r.ok for r in results), "judge_seconds": seconds}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--min-tokens", type=int, default=10)
    p.add_argument("--max-tokens", type=int, default=60)
    p.add_argument("--texts", type=int, default=1024)
    p.add_argument("--callers", type=int, default=16)
    p.add_argument("--group", type=int, default=8, help="texts per request in the batched run (a group's samples)")
    p.add_argument("--max-batch-tokens", type=int, default=8192)
    p.add_argument("--max-wait-ms", type=float, default=5.0)
    p.add_argument("--threads", type=int, default=1, help="torch threads of the reward-model process")
    p.add_argument("--judge-requests", type=int, default=64)
    p.add_argument("--judge-in-flight", type=int, default=16)
    p.add_argument("--judge-max-tokens", type=int, default=16)
    p.add_argument("--judge-hidden", type=int, default=64)
    p.add_argument("--serve-threads", type=int, default=1)
    p.add_argument("--no-judge", action="store_true")
    args = p.parse_args()
    torch.set_num_threads(1)
    rng = random.Random(0)
    texts = ["".join(rng.choice(ALPHABET) for _ in range(rng.randint(args.min_tokens, args.max_tokens)))
             for _ in range(args.texts)]
    out: dict = {"config": vars(args), "cpus": len(os.sched_getaffinity(0)), "loadavg_at_start": os.getloadavg()[0]}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        folder = rm_folder(root, args)
        batched = run_rm(folder, texts, args.callers, args, args.max_batch_tokens, args.max_wait_ms, args.group)
        texts_alone = run_rm(folder, texts, args.callers, args, args.max_batch_tokens, args.max_wait_ms)
        unbatched = run_rm(folder, texts, args.callers, args, 1, args.max_wait_ms, args.group)
        single = run_rm(folder, texts, 1, args, args.max_batch_tokens, 0.0)
        out |= {"rm_batched_samples_per_s": batched["samples_per_s"],
                "rm_single_samples_per_s": single["samples_per_s"],
                "rm_batching_speedup": batched["samples_per_s"] / single["samples_per_s"],
                "rm_batched_one_text_requests_samples_per_s": texts_alone["samples_per_s"],
                "rm_unbatched_samples_per_s": unbatched["samples_per_s"],
                "rm_forward_batching_speedup": batched["samples_per_s"] / unbatched["samples_per_s"],
                "rm_batched_tokens_per_cpu_s": batched["tokens_per_cpu_s"],
                "rm_single_tokens_per_cpu_s": single["tokens_per_cpu_s"],
                "rm_detail": {"batched": batched, "batched_one_text_requests": texts_alone, "unbatched": unbatched,
                              "single": single}}
        if not args.no_judge:
            out |= run_judge(judge_folder(root, args.judge_hidden), args)
    print(json.dumps(out, indent=1, default=float))


if __name__ == "__main__":
    main()
