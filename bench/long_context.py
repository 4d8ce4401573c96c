"""Long-context benchmark: one long prompt prefilled and 256 tokens decoded by the engine, dense
attention (where it fits) and block-sparse (engine.sparse_*) in the same run, on a small
random-init model. Prints one JSON object:

    {"lengths": {"<tokens>": {"dense": {...}, "sparse": {...}}}, "model": {...}, "sparse": {...}}

with, per mode, `prefill_s`, `decode_s` (256 greedy tokens), `peak_rss_gib` (of this process,
so far: modes run in order, dense first), `kv_bytes_per_token`, and for sparse where dense ran,
`top1_agreement` and `kl` (mean KL(dense || sparse) in nats) of the next-token distributions (and
dense's mean entropy: a random-init model's are nearly flat, so top-1 flips on tiny changes) at
`--probes` prompt prefixes spread over the prompt's second half (each prefix is prefilled on top
of the one before through the prefix cache). Dense is skipped above `--dense-max` tokens.

    python bench/long_context.py [--lengths 8192,32768] [--topk 16] [--rest-group 16] [--block 64] [--threads 2]
        [--kv-dtype fp16|bf16|int8] [--offload-dir DIR] [--model HF_FOLDER [--text FILE | --ids FILE] [--probe-at FILE]]
        [--needle]

A trained model for `--model`: `bench/long_context_model.py` trains one here (its folder's
`document.json` is the prompt for `--ids`). `--needle` runs the hand-wired retrieval model of
`tempering.models.needle` on its own documents instead: every probe's answer is a key in the
prompt's first quarter, so each mode's `next_token_accuracy` says whether its attention found it
(reported for the sparse mode at lengths dense does not run, too).
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tempering.engine import LLM, SamplingParams  # noqa: E402
from tempering.models import Arch, build_model, load_hf  # noqa: E402
from tempering.models.needle import haystack, needle_model  # noqa: E402
from tempering.tokenizer import load_tokenizer  # noqa: E402

NEW_TOKENS = 256


def arch(max_len: int) -> Arch:
    return Arch(vocab_size=512, hidden_size=256, intermediate_size=512, num_hidden_layers=4, num_attention_heads=4,
                num_key_value_heads=2, head_dim=64, max_position_embeddings=max_len, tie_word_embeddings=False)


def rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def engine(model, length: int, args, sparse: bool) -> LLM:
    options = {"sparse_topk": args.topk, "sparse_sink_blocks": args.sinks, "sparse_local_blocks": args.local,
               "sparse_rest_group": args.rest_group, "kv_dtype": args.kv_dtype,
               "kv_offload_dir": args.offload_dir} if sparse else {}
    return LLM(model, max_seq_len=length + NEW_TOKENS + args.block, block_size=args.block, max_batch_size=1,
               max_batched_tokens=args.chunk, **options)


def prefill_and_decode(llm: LLM, prompt: list[int]) -> dict:
    """Time to the first token (the prefill), then the rest of NEW_TOKENS greedy tokens."""
    start = time.perf_counter()
    llm.add_request(prompt, SamplingParams(temperature=0, max_tokens=NEW_TOKENS, ignore_eos=True))
    first = None
    while llm.has_unfinished():
        outputs = llm.step()
        if first is None and any(o.outputs[0].token_ids for o in outputs):
            first = time.perf_counter()
            after_prefill = llm.kv_usage()
    end = time.perf_counter()
    held = llm.kv_usage()
    return {"prefill_s": round(first - start, 3), "decode_s": round(end - first, 3),
            "kv_bytes_per_token": llm.pool.bytes_per_token,
            # what the engine reports it holds: the context's blocks, and of the pool's bytes how
            # many are in memory and how many in the offload file (after the prefill, at the end)
            "kv_gib": {"context": _gib(after_prefill.running_bytes), "resident_after_prefill":
                       _gib(after_prefill.resident_bytes), "resident_at_end": _gib(held.resident_bytes),
                       "in_file": _gib(held.file_bytes)}}


def _gib(n: int) -> float:
    return round(n / 2**30, 4)


def read_json(ap: argparse.ArgumentParser, path: str, option: str):
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        ap.error(f"{option} {path}: {e}")


def distributions(llm: LLM, prompt: list[int], probes: list[int]) -> torch.Tensor:
    """Next-token log-probabilities after each prefix prompt[:p] -> [len(probes), vocab]."""
    seen: list[torch.Tensor] = []
    hook = llm.model.lm_head.register_forward_hook(lambda m, i, out: seen.append(out[-1].float().log_softmax(-1)))
    try:
        out = []
        for p in probes:
            seen.clear()
            llm.generate([prompt[:p]], SamplingParams(temperature=0, max_tokens=1))
            out.append(seen[-1])
        return torch.stack(out)
    finally:
        hook.remove()


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lengths", default="8192,32768,131072,1048576")
    ap.add_argument("--dense-max", type=int, default=32768)
    ap.add_argument("--topk", type=int, default=16)
    ap.add_argument("--sinks", type=int, default=1)
    ap.add_argument("--local", type=int, default=2)
    ap.add_argument("--rest-group", type=int, default=16, help="engine.sparse_rest_group: unread blocks attended "
                    "as one mean key per this many blocks (0: left out)")
    ap.add_argument("--block", type=int, default=64)
    ap.add_argument("--chunk", type=int, default=2048, help="max_batched_tokens: the prefill chunk")
    # 128: agreement is a rate; over 32 probes one flip is 3%, too coarse to tell 97% from 99%
    ap.add_argument("--probes", type=int, default=128)
    ap.add_argument("--probe-at", default="", help="a JSON list of prompt positions to probe instead (those in "
                    "the prompt's second half, at most --probes): the next-token distributions after prompt[:p], "
                    "and each mode's accuracy on prompt[p], e.g. the asks.json of bench/long_context_model.py's "
                    "folder, where the next token is a value stated far back")
    ap.add_argument("--kv-dtype", default="fp32", choices=["fp32", "fp16", "bf16", "int8"], help="the sparse mode's KV storage")
    ap.add_argument("--offload-dir", default="",
                    help="the sparse mode's engine.kv_offload_dir: cold KV blocks in a file there")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--text", default="", help="with --model: a text file whose tokens (repeated) are the prompt")
    ap.add_argument("--ids", default="", help="a JSON list of token ids (repeated) as the prompt, e.g. the "
                    "document.json of bench/long_context_model.py's folder")
    ap.add_argument("--model", default="", help="an HF model folder (a trained long-context model) instead of the "
                    "random-init one; --logit-scale and --qk-scale are then ignored")
    ap.add_argument("--needle", action="store_true", help="the hand-wired retrieval model (tempering.models.needle) "
                    "and its documents instead: each probe's answer needs one key in the prompt's first quarter; "
                    "each mode's next_token_accuracy is reported, the sparse mode's also where dense does not run")
    ap.add_argument("--needle-noise", type=float, default=0.0, help="with --needle: the other tokens' keys are "
                    "random with this fraction of a needle key's norm (distractors for the block selection)")
    ap.add_argument("--qk-scale", type=float, default=1.0,
                    help="multiplies q_proj and k_proj: > 1 concentrates a random-init model's attention")
    ap.add_argument("--logit-scale", type=float, default=30.0,
                    help="multiplies lm_head: a random-init model's distributions are nearly flat otherwise")
    return ap


def checked_lengths(ap: argparse.ArgumentParser, args) -> list[int]:
    """The options' combinations checked (one-line errors); the prompt lengths."""
    if args.text and not args.model:
        ap.error("--text needs --model (its tokenizer)")
    if args.text and args.ids:
        ap.error("--text and --ids both give the prompt: pass one")
    if args.needle_noise < 0 or (args.needle_noise and not args.needle):
        ap.error(f"--needle-noise {args.needle_noise}: a fraction >= 0, with --needle")
    if args.needle and (args.model or args.text or args.ids or args.probe_at):
        ap.error("--needle brings its own model, prompt and probes: it takes no --model, --text, --ids or --probe-at")
    try:
        lengths = [int(x) for x in args.lengths.split(",")]
    except ValueError:
        lengths = []
    if not lengths or min(lengths) < 2 * args.block:
        ap.error(f"--lengths {args.lengths}: expected comma-separated token counts of at least 2 blocks "
                 f"({2 * args.block} tokens at --block {args.block})")
    for option, least in (("dense_max", 1), ("block", 1), ("chunk", 1), ("probes", 1), ("threads", 1),
                          ("topk", 0), ("sinks", 0), ("local", 1), ("rest_group", 0)):
        if getattr(args, option) < least:
            ap.error(f"--{option.replace('_', '-')}: expected an integer >= {least}, got {getattr(args, option)}")
    return lengths


def bench_model(args, max_len: int):
    """A trained (--model) or wired (--needle) model as it is; else the random-init one, its
    attention and next-token distributions sharpened by --qk-scale and --logit-scale."""
    if args.model or args.needle:
        model = load_hf(args.model).eval() if args.model else needle_model(max_len, noise=args.needle_noise)
        args.logit_scale = args.qk_scale = 1.0
        return model
    model = build_model(arch(max_len), seed=0).eval()
    with torch.no_grad():  # peaked next-token distributions, as a trained model's are (see entropy_nats)
        model.lm_head.weight.mul_(args.logit_scale)
        for layer in model.model.layers:  # peaked attention, as a trained model's mostly is
            layer.self_attn.q_proj.weight.mul_(args.qk_scale)
            layer.self_attn.k_proj.weight.mul_(args.qk_scale)
    return model


def given_ids(ap: argparse.ArgumentParser, args, vocab_size: int) -> tuple[list[int], list[int]]:
    """The prompt's token ids from --text or --ids (to be repeated), and the --probe-at positions."""
    text_ids = load_tokenizer(args.model).encode(Path(args.text).read_text()) if args.text else []
    if args.ids:
        text_ids = read_json(ap, args.ids, "--ids")
        if not text_ids or not all(isinstance(t, int) and 0 <= t < vocab_size for t in text_ids):
            ap.error(f"--ids {args.ids}: not a non-empty JSON list of token ids below the vocabulary size {vocab_size}")
    probe_at = read_json(ap, args.probe_at, "--probe-at") if args.probe_at else []
    if args.probe_at and not (text_ids and all(isinstance(p, int) and p > 0 for p in probe_at)):
        ap.error(f"--probe-at {args.probe_at}: needs --ids or --text, and a JSON list of positive positions")
    return text_ids, probe_at


def prompt_and_probes(ap: argparse.ArgumentParser, args, length: int, vocab_size: int, text_ids: list[int],
                      probe_at: list[int]) -> tuple[list[int], list[int]]:
    """A `length`-token prompt and the positions probed in its second half."""
    if args.needle:
        try:
            doc = haystack(length, args.probes)
        except ValueError as e:
            ap.error(f"--needle: {e}")
        return doc.ids, doc.probes
    if text_ids:  # the text (ids) repeated to the length (a trained model reads text, not random ids)
        prompt = (text_ids * (length // len(text_ids) + 1))[:length]
    else:
        prompt = torch.randint(0, vocab_size, (length,), generator=torch.Generator().manual_seed(length)).tolist()
    if probe_at:
        probes = [p for p in probe_at if length // 2 <= p < length][: args.probes]
        if not probes:
            ap.error(f"--probe-at {args.probe_at}: no position in the second half of the {length}-token prompt")
        return prompt, probes
    # prefixes ending on block boundaries, so each probe's prefill reuses the one before
    return prompt, sorted({(length // 2 + i * (length // 2) // args.probes) // args.block * args.block
                           for i in range(args.probes)})


def measure(model, args, length: int, prompt: list[int], probes: list[int], known: bool) -> dict:
    """One length's row: each mode's prefill and decode, and where both modes ran (or the
    answers are `known`), their next-token distributions at the probes compared."""
    row: dict = {}
    dists = {}
    for mode in ("dense", "sparse"):
        if mode == "dense" and length > args.dense_max:
            continue
        llm = engine(model, length, args, mode == "sparse")
        row[mode] = prefill_and_decode(llm, prompt)
        if "dense" in row or args.needle:
            llm = engine(model, length, args, mode == "sparse")  # a fresh cache: probes prefill anew
            dists[mode] = distributions(llm, prompt, probes)
        row[mode]["peak_rss_gib"] = round(rss_gib(), 3)
        del llm
    if len(dists) == 2:
        d, s = dists["dense"], dists["sparse"]
        row["sparse"]["top1_agreement"] = round(float((d.argmax(-1) == s.argmax(-1)).float().mean()), 4)
        row["sparse"]["kl"] = round(float((d.exp() * (d - s)).sum(-1).mean()), 6)
        # how peaked the dense distributions are: top-1 agreement means little when they are flat
        row["dense"]["entropy_nats"] = round(float(-(d.exp() * d).sum(-1).mean()), 3)
        row["sparse"]["probes"] = len(probes)
    if known:  # the right next token is known: how often each mode predicts it
        truth = torch.tensor([prompt[p] for p in probes])
        for mode, dist in dists.items():
            row[mode]["next_token_accuracy"] = round(float((dist.argmax(-1) == truth).float().mean()), 4)
            row[mode]["probes"] = len(probes)
    return row


def main() -> None:
    ap = parser()
    args = ap.parse_args()
    lengths = checked_lengths(ap, args)
    torch.set_num_threads(args.threads)
    model = bench_model(args, max(lengths) + NEW_TOKENS + args.block)
    vocab = model.arch.vocab_size
    report: dict = {"model": {"parameters": sum(p.numel() for p in model.parameters()), "threads": args.threads,
                              "path": args.model or (f"needle (noise {args.needle_noise})" if args.needle else None),
                              "logit_scale": args.logit_scale, "qk_scale": args.qk_scale},
                    "sparse": {"topk": args.topk, "sinks": args.sinks, "local": args.local, "block": args.block,
                               "rest_group": args.rest_group,
                               "kv_dtype": args.kv_dtype, "offload": bool(args.offload_dir)},
                    "lengths": {}}
    text_ids, probe_at = given_ids(ap, args, vocab)
    for length in lengths:
        prompt, probes = prompt_and_probes(ap, args, length, vocab, text_ids, probe_at)
        row = measure(model, args, length, prompt, probes, known=bool(probe_at) or args.needle)
        report["lengths"][str(length)] = row
        print(json.dumps({"done": length, **row}), file=sys.stderr, flush=True)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
