"""Learning speed on a TRL-peer setting: held-out greedy accuracy against RL wall seconds.

What it measures (issue 11): how fast Tempering's RL, run with the defaults a user gets, takes an
SFT-warmed model on the TRL peer's task to 0.80 held-out greedy accuracy. The peer (TRL 1.16
`GRPOTrainer`, the team's PEERS.md, "Training loop") needs about 300 s of RL on this kind of
machine; the target is 150 s. By default the bench builds its own start, modeled on the peer's
but not the peer's: `--model DIR` takes any HF folder instead (the peer's own SFT checkpoint,
say, BOS-adding tokenizers included) and `--heldout FILE` the held-out problems (the peer's own
500, one `a+b` per line), which makes the comparison exact.

How:

1. A model and tokenizer of the peer's size, built here (no hub): a Qwen2 with hidden 128,
   intermediate 384, 4 layers, 4 heads, 2 KV heads, q/k/v biases, tied embeddings (790,656
   parameters: the peer's "0.79M") and a character tokenizer made with the `tokenizers` library
   (`<pad> <bos> <eos> <unk>`, the ten digits, `+`, `=`; no BOS added), from transformers'
   `Qwen2ForCausalLM`, random init (seed 0). The peer's own checkpoint may differ in shape,
   BOS and SFT loss.
2. SFT warm-up, a plain loop on the transformers model (AdamW lr 1e-3, batch 64, examples from
   the task's training split, one torch thread), stopped at the first step whose held-out greedy
   accuracy on the 500 held-out problems reaches 0.25 (evaluated every 10 steps, and every
   step once it passes 0.15). The loss is the plain language-model loss on the whole sequence
   (`07+45=052<eos>`), which is what TRL's `SFTTrainer` trains on a text dataset;
   `--sft-loss answer` puts it on the answer and its eos only. On one machine the warm-up repeats
   exactly (same seed, same weights, bit for bit); across machines it does not: its float
   arithmetic follows the CPU's vector unit and the torch build, and with seed 0 it stopped at
   step 608 on one machine and 951 on another. The output's `start` records what the start was
   (SFT steps and accuracy, the CPU capability, torch) and numbers compare only between runs of
   one start; `--model` reuses a start across runs and machines. The start matters more than
   anything in RL: starts that all score 0.25-0.27 greedy took RL to 0.80 in about 800 steps,
   to 0.62, or were near 0.50 at 800 steps and need about 3,000; no property of the start we
   measured (sampled reward, entropy, accuracy per digit) predicts which. `--seed` picks another
   start. The folder is saved as a Hugging Face folder (config.json, model.safetensors,
   tokenizer.json, tokenizer_config.json) and checked at once, as any `--model` folder is:
   `tempering.models.load_hf` must give the transformers logits (max abs difference < 1e-4) and
   `tempering.tokenizer.load_tokenizer` the ids transformers' own tokenizer gives (a BOS it adds
   included).
3. RL: `tempering.train.train` on a config built as the CLI builds it (`load_config(None,
   overrides)`), so every key not listed here is the package default. The overrides are the
   peer's fixed setting and the evaluation cadence only: `model.path` (the folder), the task
   (`tasks.plugins = ["peer_addition"]`, the domain in `bench/peer_addition.py`, weight 1; its
   held-out split is exactly the 500 problems, `tasks.eval_per_domain = 500`), the peer's reward
   (`reward.weights = {outcome = 0.5, partial = 0.5}`: 0.5 x exact + 0.5 x digits in place), its
   batch shape and sampling (16 prompts x 8 samples, at most 4 new tokens, temperature 1.0),
   `eval.max_tokens = 4`, `eval.every = 10` steps, `run.steps` large (the run is stopped by time,
   below), `sft.steps = 0`, and the run folder. Extra `--section.key=value` arguments are added
   to the overrides (for sweeps; they are listed in the output's `overrides`).
4. Stopping: a thread reads metrics.jsonl as it grows and, once the RL seconds of the last step
   reach `--rl-seconds`, sends this process SIGINT, which the run takes as "finish after this
   step" (checkpoint, final evaluation, summary).

RL seconds. metrics.jsonl has one row per step, written after the step's evaluation (a
checkpoint follows it, its seconds then added to the row), with `elapsed_s` (the run's wall
clock when the row was written, start-up included) and `seconds/step` (from the trainer's wait
for the batch to the publish of the new weights), `seconds/eval` and `seconds/checkpoint` on the
steps that have them. With E_s the row's `elapsed_s`:

    rl_seconds(s) = (E_s - sum_{k<=s} eval_k) - (E_1 - eval_1 - step_1)

The second term is the moment RL started (after start-up, the rollout worker's spawn and the
baseline evaluation), so rl_seconds counts the trainer's steps, the waits for rollouts, the
publishes, the metric logging between steps and the checkpoints every `run.checkpoint_every`
steps (a user running the defaults pays them), and leaves out held-out evaluation time only.
The evaluation after step s scores the weights published by step s, so it is plotted at
rl_seconds(s). Caveat: while the trainer waits for an evaluation, the rollout worker may finish
groups already admitted for the next batch (at most one batch ahead under the default staleness
bound); when the trainer is the slower side (it is here) that wait would have been near zero
anyway.

Output: one JSON object on stdout (progress on stderr): `baseline_accuracy` (Tempering's own
baseline evaluation of the SFT folder), `curve` ([rl_seconds, held-out accuracy] per
evaluation, from [0, baseline]), `seconds_to_0.8` (the first evaluation at which the mean of the
last three evaluations is >= 0.80, as PEERS.md's table reads accuracy; null if never),
`seconds_to_0.8_single` (the first single evaluation >= 0.80), `accuracy_at` (that mean at 30,
60, 90, 120, 150 s), where the step time went, and the SFT numbers. Timings on a shared 2-core
machine are pessimistic; compare runs made in one sitting.

    .venv/bin/python bench/learning.py [--rl-seconds 150] [--out DIR] [--model DIR] [--sft-loss sequence|answer] [--section.key=value ...]

`--model DIR` skips steps 1-2 and uses a folder made before (the same SFT checkpoint for every
run of a sweep).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import sys
import threading
import time
from pathlib import Path

import torch

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH.parent))  # the package, when it is not installed
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))  # peer_addition; the spawned rollout worker inherits sys.path

import peer_addition as task  # noqa: E402

SPECIALS = ("<pad>", "<bos>", "<eos>", "<unk>")
PEER_ARCH = dict(hidden_size=128, intermediate_size=384, num_hidden_layers=4, num_attention_heads=4,
                 num_key_value_heads=2, max_position_embeddings=64, rope_theta=10000.0, rms_norm_eps=1e-6,
                 tie_word_embeddings=True)
# The peer's fixed setting and the evaluation cadence; everything else is the package default.
PEER_OVERRIDES = [
    f"--tasks.weights={{{task.NAME} = 1.0}}",
    f'--tasks.plugins=["{task.NAME}"]',
    f"--tasks.eval_per_domain={task.HELDOUT}",
    "--reward.weights={outcome = 0.5, partial = 0.5}",
    "--rollout.tasks_per_step=16",
    "--rollout.samples_per_task=8",
    "--rollout.max_tokens=4",
    "--rollout.temperature=1.0",
    "--eval.max_tokens=4",
    "--eval.every=10",
    "--sft.steps=0",
    "--run.steps=1000000",
]
MARKS = (30, 60, 90, 120, 150)


def log(msg: str) -> None:
    print(f"[bench/learning] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# The model, tokenizer and SFT checkpoint (modeled on the peer's)


def build_tokenizer(folder: Path) -> None:
    """A character tokenizer made with the `tokenizers` library, as an HF folder's files."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

    vocab = {tok: i for i, tok in enumerate([*SPECIALS, *sorted(task.ALPHABET)])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    tok.decoder = decoders.Fuse()
    tok.add_special_tokens(list(SPECIALS))
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<bos>", "eos_token": "<eos>",
        "pad_token": "<pad>", "unk_token": "<unk>", "add_bos_token": False, "add_eos_token": False}, indent=2))


def build_model(vocab: dict[str, int], seed: int):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    cfg = Qwen2Config(vocab_size=len(vocab), bos_token_id=vocab["<bos>"], eos_token_id=vocab["<eos>"],
                      pad_token_id=vocab["<pad>"], **PEER_ARCH)
    return Qwen2ForCausalLM(cfg)


def encode(vocab: dict[str, int], text: str) -> list[int]:
    return [vocab[c] for c in text]


@torch.no_grad()
def greedy_accuracy(model, vocab: dict[str, int], pairs) -> float:
    """Greedy, at most 4 new tokens; right when the three digits come and then eos (as the
    verifier reads it: the answer must end, with nothing special inside it)."""
    model.eval()
    prompts = torch.tensor([encode(vocab, task.problem(a, b)[0]) for a, b in pairs])
    want = torch.tensor([encode(vocab, task.problem(a, b)[1]) + [vocab["<eos>"]] for a, b in pairs])
    ids = prompts
    for _ in range(4):
        nxt = model(input_ids=ids).logits[:, -1].argmax(-1, keepdim=True)
        ids = torch.cat([ids, nxt], dim=1)
    got = ids[:, prompts.shape[1]:]
    model.train()
    return float((got == want).all(-1).float().mean())


def sft_to(model, vocab: dict[str, int], target: float, seed: int, lr: float = 1e-3, batch: int = 64,
           max_steps: int = 3000, loss_on: str = "sequence") -> dict:
    """Cross-entropy on the whole sequence (`loss_on="sequence"`) or on the answer and its eos
    (`"answer"`) until held-out greedy accuracy >= `target`."""
    rng = random.Random(seed)
    train, heldout = task.train_pairs(), task.heldout_pairs()
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    model.train()
    t0, acc, step = time.perf_counter(), 0.0, 0
    history = []
    while step < max_steps:
        rows = rng.sample(train, batch)
        ids = torch.tensor([encode(vocab, p + a) + [vocab["<eos>"]] for p, a in (task.problem(*x) for x in rows)])
        labels = ids.clone()
        if loss_on == "answer":
            labels[:, :6] = -100  # the prompt: no loss
        loss = model(input_ids=ids, labels=labels).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        step += 1
        # an evaluation (0.5 s) costs ten steps: every 10th step, and every step once close
        if step % 10 == 0 or acc >= 0.6 * target:
            acc = greedy_accuracy(model, vocab, heldout)
            if step % 20 == 0 or acc >= target:
                history.append([step, round(float(loss.detach()), 4), acc])
                log(f"sft step {step}: loss {float(loss.detach()):.3f}, held-out greedy accuracy {acc:.3f}")
            if acc >= target:
                break
    model.eval()
    return {"steps": step, "heldout_accuracy": acc, "seconds": time.perf_counter() - t0, "lr": lr,
            "batch_size": batch, "loss_on": loss_on, "history": history}


def make_peer_folder(folder: Path, target: float, seed: int, loss_on: str = "sequence") -> dict:
    build_tokenizer(folder)
    vocab = json.loads((folder / "tokenizer.json").read_text())["model"]["vocab"]
    model = build_model(vocab, seed)
    params = sum(p.numel() for p in model.parameters())
    log(f"peer model: Qwen2, {params:,} parameters; SFT warm-up to {target} held-out greedy accuracy")
    sft = sft_to(model, vocab, target, seed, loss_on=loss_on)
    model.save_pretrained(str(folder))
    return {"parameters": params, "sft": sft, "seed": seed, "torch": torch.__version__,
            "cpu_capability": torch.backends.cpu.get_cpu_capability()}


def check_folder(folder: Path) -> dict:
    """Tempering reads the folder as transformers does: the same logits, the same prompt ids (a
    BOS the tokenizer adds included). SystemExit naming the difference otherwise."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tempering.models import load_hf
    from tempering.tokenizer import load_tokenizer

    hf = AutoModelForCausalLM.from_pretrained(str(folder)).eval()
    ours = load_hf(folder).eval()
    hf_tok = AutoTokenizer.from_pretrained(str(folder))
    tok = load_tokenizer(folder)
    prompts = [task.problem(a, b)[0] + task.problem(a, b)[1] for a, b in task.heldout_pairs()[:64]]
    ids = [tok.encode_prompt(p) for p in prompts]
    want = [hf_tok(p)["input_ids"] for p in prompts]
    if ids != want:
        i = next(i for i, (a, b) in enumerate(zip(ids, want)) if a != b)
        raise SystemExit(f"bench/learning: {folder}: Tempering's tokenizer gives {ids[i]} for {prompts[i]!r}, "
                         f"transformers' {want[i]}")
    if tok.eos_id != hf_tok.eos_token_id:
        raise SystemExit(f"bench/learning: {folder}: eos id {tok.eos_id}, transformers' {hf_tok.eos_token_id}")
    x = torch.tensor(ids)
    with torch.no_grad():
        diff = float((hf(input_ids=x).logits - ours(x)).abs().max())
    if not diff < 1e-4:
        raise SystemExit(f"bench/learning: {folder}: load_hf logits differ from transformers' by {diff}")
    return {"max_abs_logit_diff": diff, "parameters": sum(p.numel() for p in hf.parameters()),
            "bos_added": bool(tok.prefix_ids)}


def start_of(made: dict, folder: Path) -> dict:
    """What RL starts from, and what made it: a start repeats only on a machine of the same
    floating-point path (CPU capability, torch build)."""
    sft = made.get("sft") or {}
    return {"model": str(folder), "built_here": bool(sft), "sft_steps": sft.get("steps"),
            "sft_heldout_accuracy": sft.get("heldout_accuracy"), "seed": made.get("seed"),
            "cpu_capability": made.get("cpu_capability", torch.backends.cpu.get_cpu_capability()),
            "torch": made.get("torch", torch.__version__)}


# ---------------------------------------------------------------------------------------------
# RL seconds and the curve


def read_rows(path: Path) -> list[dict]:
    rows = []
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:  # a line being written
                break
    return rows


def rl_seconds(rows: list[dict]) -> dict[int, float]:
    """step -> RL wall seconds at the end of that step (see the module docstring)."""
    if not rows:
        return {}
    first = rows[0]
    start = first["elapsed_s"] - sum(first.get(f"seconds/{k}", 0.0) for k in ("step", "eval"))
    out, evals = {}, 0.0
    for r in rows:
        evals += r.get("seconds/eval", 0.0)
        out[r["step"]] = r["elapsed_s"] - evals - start
    return out


def smoothed(curve: list[list[float]]) -> list[list[float]]:
    """[t, mean of the last three evaluations up to t] (fewer at the start)."""
    return [[t, sum(a for _, a in curve[max(0, i - 2): i + 1]) / len(curve[max(0, i - 2): i + 1])]
            for i, (t, _) in enumerate(curve)]


def first_at(curve: list[list[float]], level: float) -> float | None:
    return next((t for t, a in curve if a >= level), None)


def at(curve: list[list[float]], t: float) -> float | None:
    """The value of the last point at or before `t`."""
    points = [a for s, a in curve if s <= t + 1e-9]
    return points[-1] if points else None


class Stopper(threading.Thread):
    """Sends this process SIGINT once the RL seconds in metrics.jsonl reach `budget`. Reads only
    what was appended since its last look, twice a second (it shares the cores with the run)."""

    def __init__(self, metrics: Path, budget: float):
        super().__init__(daemon=True)
        self.metrics, self.budget, self.done = metrics, budget, threading.Event()

    def run(self) -> None:
        offset, start, evals, partial = 0, None, 0.0, ""
        while not self.done.wait(0.5):
            if not self.metrics.exists():
                continue
            with open(self.metrics) as f:
                f.seek(offset)
                chunk = f.read()
                offset = f.tell()
            lines = (partial + chunk).split("\n")
            partial = lines.pop()  # an unfinished last line waits for the next look
            for line in lines:
                if not line.strip():
                    continue
                r = json.loads(line)
                if start is None:
                    start = r["elapsed_s"] - sum(r.get(f"seconds/{k}", 0.0) for k in ("step", "eval"))
                evals += r.get("seconds/eval", 0.0)
                if r["elapsed_s"] - evals - start >= self.budget:
                    os.kill(os.getpid(), signal.SIGINT)
                    return


def run_rl(folder: Path, out: Path, budget: float, extra: list[str]) -> dict:
    from tempering.config import load_config, to_dict
    from tempering.pool import TaskPool
    from tempering.train import train

    overrides = [f"--model.path={folder}", f"--run.dir={out}", "--run.name=rl", *PEER_OVERRIDES, *extra]
    cfg = load_config(None, overrides)
    run_dir = cfg.run_dir
    # Tempering's evaluation set is exactly the bench's 500 held-out problems, in order
    held = [t.prompt for t in TaskPool(cfg.tasks).heldout()]
    if held != [task.problem(a, b)[0] for a, b in task.heldout_pairs()]:
        raise SystemExit("bench/learning: Tempering's held-out set is not the bench's 500 problems")
    stopper = Stopper(run_dir / "metrics.jsonl", budget)
    stopper.start()
    t0 = time.perf_counter()
    try:
        with contextlib.redirect_stdout(sys.stderr):  # the run's own lines: stdout carries the one JSON object
            summary = train(cfg)
    finally:
        stopper.done.set()
    wall = time.perf_counter() - t0
    rows = read_rows(run_dir / "metrics.jsonl")
    times = rl_seconds(rows)
    baseline = json.loads((run_dir / "eval_baseline.json").read_text())["accuracy"]
    curve, by_step = [[0.0, baseline]], [[0, baseline]]
    for r in rows:
        f = run_dir / f"eval_step-{r['step']:06d}.json"
        if f.exists():
            acc = json.loads(f.read_text())["accuracy"]
            curve.append([round(times[r["step"]], 2), acc])
            by_step.append([r["step"], acc])
    last = rows[-1]["step"] if rows else 0
    if rows and not (run_dir / f"eval_step-{last:06d}.json").exists():
        curve.append([round(times[last], 2), summary["final_accuracy"]])
        by_step.append([last, summary["final_accuracy"]])
    smooth = smoothed(curve)
    total = max(times.values()) if times else 0.0
    n = max(len(rows), 1)
    mean = lambda key: sum(r.get(key, 0.0) for r in rows) / n  # noqa: E731
    evals = [r["seconds/eval"] for r in rows if "seconds/eval" in r]
    ckpts = [r["seconds/checkpoint"] for r in rows if "seconds/checkpoint" in r]
    return {
        "baseline_accuracy": baseline,
        "curve": curve,
        "seconds_to_0.8": first_at(smooth[1:], 0.8),
        "seconds_to_0.8_single": first_at(curve[1:], 0.8),
        "seconds_to_0.5": first_at(smooth[1:], 0.5),
        "accuracy_at": {str(t): (None if total < t - 3 else at(smooth, t)) for t in MARKS},
        "final_accuracy": summary["final_accuracy"],
        "curve_by_step": by_step,  # [step, accuracy]: the same evaluations against steps, which load does not move
        "steps": len(rows), "rl_seconds": total, "wall_seconds": wall,
        "completions_per_s": sum(r.get("samples/trained", 0) for r in rows) / max(total, 1e-9),
        "generated_per_s": len(rows) * cfg.rollout.tasks_per_step * cfg.rollout.samples_per_task / max(total, 1e-9),
        # per step, seconds: the trainer's loop (wait + make_batch + train step + publish), its
        # wait for the batch, the rollout of the batch (dispatch to last score, overlapping the
        # trainer), and evaluation and checkpoint, where they happen
        "per_step": {"step": mean("seconds/step"), "wait_rollout": mean("seconds/wait_rollout"),
                     "train_and_publish": mean("seconds/step") - mean("seconds/wait_rollout"),
                     "rollout": mean("seconds/rollout"), "rl_seconds": total / n,
                     "logging_and_checkpoints": total / n - mean("seconds/step")},
        "eval_seconds_each": sum(evals) / max(len(evals), 1),
        "checkpoint_seconds_each": sum(ckpts) / max(len(ckpts), 1),
        "reward_mean_last_20": sum(r.get("reward/mean", 0.0) for r in rows[-20:]) / max(len(rows[-20:]), 1),
        "overrides": overrides[4:], "extra_overrides": extra, "run_dir": str(run_dir),
        "config": {k: v for k, v in to_dict(cfg).items() if k in ("trainer", "algorithm", "buffer", "run")},
    }


def code_version() -> dict:
    """The commit the package was imported from, and whether its tree had local changes."""
    import subprocess

    import tempering

    root = Path(tempering.__file__).resolve().parents[1]
    git = lambda *a: subprocess.run(["git", "-C", str(root), *a], capture_output=True, text=True).stdout.strip()  # noqa: E731
    return {"package": str(root), "commit": git("rev-parse", "--short", "HEAD") or None,
            "modified": [line[3:] for line in git("status", "--porcelain", "--untracked-files=no").splitlines()]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rl-seconds", type=float, default=150.0, help="RL wall seconds to run for (evaluation excluded)")
    p.add_argument("--out", default=None, help="folder for the model and the run (default runs/bench_learning/<time>)")
    p.add_argument("--model", default=None, help="use this SFT'd HF folder instead of building one")
    p.add_argument("--sft-target", type=float, default=0.25)
    p.add_argument("--sft-loss", choices=("sequence", "answer"), default="sequence",
                   help="the warm-up's loss: on the whole sequence (TRL's SFTTrainer on text) or on the answer only")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--heldout", default=None, metavar="FILE",
                   help="the 500 held-out problems, one a+b per line (e.g. the peer's own split)")
    args, extra = p.parse_known_args(argv)
    if args.heldout:  # before the split is first read; the spawned rollout worker inherits it
        os.environ[task.HELDOUT_ENV] = str(Path(args.heldout).resolve())
        task.read_heldout(os.environ[task.HELDOUT_ENV])  # a bad file: one line, now
    bad = [x for x in extra if not (x.startswith("--") and "=" in x)]
    if bad:
        p.error(f"unrecognized arguments: {' '.join(bad)} (config overrides look like --section.key=value)")
    out = Path(args.out or BENCH.parent / "runs" / "bench_learning" / time.strftime("%Y%m%d-%H%M%S")).resolve()
    out.mkdir(parents=True, exist_ok=True)
    result: dict = {"machine": {"cores": len(os.sched_getaffinity(0)), "loadavg_start": os.getloadavg()[0]},
                    "code": code_version()}
    torch.set_num_threads(1)  # the warm-up (untimed): one thread is reproducible; train() sets its own
    if args.model:
        folder = Path(args.model).resolve()
        made = json.loads((folder / "bench_sft.json").read_text()) if (folder / "bench_sft.json").exists() else {}
    else:
        folder = out / "model"
        made = make_peer_folder(folder, args.sft_target, args.seed, args.sft_loss)
        (folder / "bench_sft.json").write_text(json.dumps(made, indent=2))
    result["model"] = {"path": str(folder), "arch": "Qwen2ForCausalLM", **PEER_ARCH, **check_folder(folder)}
    result["sft"] = made.get("sft")
    result["start"] = start_of(made, folder)
    result["heldout"] = args.heldout or f"bench/peer_addition.py's draw (seed {task.SEED})"
    log(f"model folder {folder}: load_hf logits match transformers "
        f"(max abs diff {result['model']['max_abs_logit_diff']:.2e}); RL for {args.rl_seconds:g} s")
    rl = run_rl(folder, out, args.rl_seconds, extra)
    result["machine"]["loadavg_end"] = os.getloadavg()[0]
    print(json.dumps({**{k: rl.pop(k) for k in ("baseline_accuracy", "curve", "seconds_to_0.8")}, **rl, **result}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
