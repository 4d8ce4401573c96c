"""`tempering train-rm`: train a scalar reward model (a `SequenceClassifier` of one label).

- Data: JSONL files of preference pairs (Bradley-Terry: loss = -log sigmoid(r_chosen -
  r_rejected)) or of scored completions (regression: mean squared error), told apart by their
  keys (`preferences.read_records`); or `demo`, the demo's procedural pairs.
- Texts: `render_text(tokenizer, prompt, completion)`, encoded as `RewardScorer` encodes them,
  and each scored where it (and transformers) scores them: the row's last token that is not pad.
  A text longer than the model's context is an error naming its record, never truncated.
- Model: `--base` (an HF folder: a causal LM gets a new score head, a classifier keeps its own),
  or a fresh random-init model from architecture flags with a character tokenizer over the
  data's characters (the demo's size trains on one CPU core in seconds).
- Held-out: a fraction of the prompts (all records of a prompt on one side), never trained on;
  each epoch prints the training loss and the held-out loss and pairwise accuracy (pairs) or
  MSE and correlation (scores).
- Output: config.json, model.safetensors, tokenizer.json(+config) and metrics.json: a folder
  `load_classifier` + `load_tokenizer` read and transformers' AutoModelForSequenceClassification
  loads. AdamW with a cosine decay to a tenth of `--lr`; no gradient accumulation; one device.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from tempering.errors import UserError
from tempering.models import (Arch, SequenceClassifier, build_classifier, last_token_index, load_classifier,
                              save_classifier)
from tempering.models.location import local_model
from tempering.reward.preferences import (DEMO_DOMAINS, Pair, Record, demo_pairs, kind_of, read_files, split_by_prompt,
                                         write_records)
from tempering.reward.reward_model import render_text
from tempering.tokenizer import Tokenizer, char_tokenizer, load_tokenizer


@dataclass(frozen=True)
class RMTrainConfig:
    data: tuple[str, ...]  # JSONL files, or ("demo",)
    out: str = ""  # "" only when just writing the demo's data
    base: str = ""  # an HF folder; "" = a fresh model of the sizes below
    epochs: int = 10
    lr: float = 0.0  # 0 = 1e-3 for a fresh model, 1e-5 from a base
    batch_size: int = 32  # records (pairs or scored completions) per step
    seed: int = 0
    held_out: float = 0.1  # fraction of the prompts
    demo_pairs: int = 4000
    demo_domains: tuple[str, ...] = DEMO_DOMAINS
    write_demo_data: str = ""
    hidden_size: int = 64
    intermediate_size: int = 176
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    max_position_embeddings: int = 256
    device: str = "cpu"

    def __post_init__(self) -> None:
        checks = [("--epochs", self.epochs, self.epochs >= 1, "an integer >= 1"),
                  ("--lr", self.lr, self.lr >= 0, "a number > 0 (0 = the default)"),
                  ("--batch-size", self.batch_size, self.batch_size >= 1, "an integer >= 1"),
                  ("--held-out", self.held_out, 0 <= self.held_out < 1, "a fraction in [0, 1)"),
                  ("--demo-pairs", self.demo_pairs, self.demo_pairs >= 2, "an integer >= 2")]
        for flag, value, ok, expected in checks:
            if not ok:
                raise UserError(f"{flag}: expected {expected}, got {value}")
        if "demo" in self.data and len(self.data) > 1:
            raise UserError(f"--data: 'demo' is the demo's pairs alone, not one of several sources ({self.data})")
        if not self.out and not self.write_demo_data:
            raise UserError("--out: a folder for the reward model is required")


@dataclass(frozen=True)
class Encoded:
    rows: tuple[list[int], ...]  # token ids: (chosen, rejected) of a pair, (completion,) of a score
    target: float = 0.0  # a scored completion's score


def bt_loss(r_chosen: torch.Tensor, r_rejected: torch.Tensor) -> torch.Tensor:
    """Bradley-Terry: mean of -log sigmoid(r_chosen - r_rejected) (logsigmoid is stable for large margins)."""
    return -F.logsigmoid(r_chosen - r_rejected).mean()


def load_records(cfg: RMTrainConfig) -> list[Record]:
    return demo_pairs(cfg.demo_pairs, cfg.seed, cfg.demo_domains) if cfg.data == ("demo",) else read_files(cfg.data)


def completions(r: Record) -> tuple[str, ...]:
    return (r.chosen, r.rejected) if isinstance(r, Pair) else (r.completion,)


def build_reward_model(cfg: RMTrainConfig, records: list[Record]) -> tuple[SequenceClassifier, Tokenizer]:
    if cfg.base:
        base = local_model(cfg.base)  # a folder, or a .gguf file converted once into the cache
        tokenizer = load_tokenizer(base)
        model = load_classifier(base, num_labels=1, new_head=True, seed=cfg.seed)
        if tokenizer.vocab_size > model.arch.vocab_size:
            raise UserError(f"--base {cfg.base}: vocab_size {model.arch.vocab_size} is smaller than the tokenizer's "
                            f"{tokenizer.vocab_size}")
        if model.arch.pad_token_id is None:
            # transformers batches a classifier only with a pad id; the scored position of an
            # unpadded text stays its last token either way
            model.arch = dataclasses.replace(model.arch, pad_token_id=tokenizer.pad_id)
        return model, tokenizer
    chars = "".join(sorted({c for r in records for text in (r.prompt, *completions(r)) for c in text}))
    tokenizer = char_tokenizer(chars)
    sizes = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(Arch) if hasattr(cfg, f.name)}
    arch = Arch(vocab_size=tokenizer.vocab_size, pad_token_id=tokenizer.pad_id, eos_token_id=tokenizer.eos_id, **sizes)
    return build_classifier(arch, 1, cfg.seed), tokenizer


def encode(records: list[Record], tokenizer: Tokenizer, model: SequenceClassifier) -> list[Encoded]:
    """Each record's texts as the scorer encodes them; a text over the context is an error naming its record."""
    limit, pad = model.arch.max_position_embeddings, model.arch.pad_token_id
    out = []
    for r in records:
        rows = []
        for completion in completions(r):
            ids = tokenizer.encode_prompt(render_text(tokenizer, r.prompt, completion)) or [pad or 0]
            if len(ids) > limit:
                raise UserError(f"{r.where}: a text of {len(ids)} tokens is longer than the reward model's context "
                                f"of {limit} (texts are not truncated; raise --max-position-embeddings)")
            rows.append(ids)
        out.append(Encoded(tuple(rows), getattr(r, "score", 0.0)))
    return out


def score_rows(model: SequenceClassifier, rows: list[list[int]], device: torch.device) -> torch.Tensor:
    """[len(rows)] scores; rows right-padded, each scored at its own last non-pad token."""
    pad = model.arch.pad_token_id
    ids = torch.full((len(rows), max(map(len, rows))), pad if pad is not None else 0, dtype=torch.long)
    last = torch.empty(len(rows), dtype=torch.long)
    for j, row in enumerate(rows):
        ids[j, : len(row)] = torch.as_tensor(row)
        last[j] = last_token_index(ids[j, : len(row)][None], pad)[0]
    return model(ids.to(device), last.to(device))[:, 0]


def batch_loss(model: SequenceClassifier, batch: list[Encoded],
               device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """(loss, scores [B, rows per record]) of a batch of one kind of record."""
    width = len(batch[0].rows)
    scores = score_rows(model, [e.rows[k] for k in range(width) for e in batch], device).view(width, -1).T
    if width == 2:
        return bt_loss(scores[:, 0], scores[:, 1]), scores
    targets = torch.tensor([e.target for e in batch], device=device)
    return F.mse_loss(scores[:, 0], targets), scores


@torch.no_grad()
def evaluate(model: SequenceClassifier, data: list[Encoded], batch_size: int, device: torch.device) -> dict:
    """Held-out loss, and pairwise accuracy (ties count half) or MSE and Pearson correlation."""
    if not data:
        return {}
    model.eval()
    losses, scores = [], []
    for i in range(0, len(data), batch_size):
        loss, s = batch_loss(model, data[i: i + batch_size], device)
        losses.append(loss.item() * len(s))
        scores.append(s.cpu())
    s = torch.cat(scores).double()
    out = {"records": len(data), "loss": sum(losses) / len(data)}
    if s.shape[1] == 2:
        margin = s[:, 0] - s[:, 1]
        out["accuracy"] = ((margin > 0).double() + 0.5 * (margin == 0).double()).mean().item()
        out["mean_margin"] = margin.mean().item()
    else:
        t = torch.tensor([e.target for e in data], dtype=torch.float64)
        out["mse"] = out["loss"]
        both = torch.stack([s[:, 0], t])
        out["correlation"] = torch.corrcoef(both)[0, 1].item() if len(data) > 1 and both.std(1).min() > 0 else None
    return out


def train_epoch(model, optimizer, schedule, data: list[Encoded], batch_size: int, gen: torch.Generator,
                device) -> float:
    model.train()
    order = torch.randperm(len(data), generator=gen).tolist()
    total = 0.0
    for i in range(0, len(order), batch_size):
        batch = [data[j] for j in order[i: i + batch_size]]
        loss, _ = batch_loss(model, batch, device)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        total += loss.item() * len(batch)
    return total / len(data)


def _line(epoch: int, loss: float | None, held: dict, seconds: float) -> str:
    parts = [f"epoch {epoch}", f"loss {loss:.4f}" if loss is not None else "loss -"]
    if held:
        named = {"accuracy": "accuracy", "mse": "mse", "correlation": "corr"}
        shown = [f"{short} {held[k]:.3f}" for k, short in named.items() if held.get(k) is not None]
        parts.append(f"held-out ({held['records']}): loss {held['loss']:.4f} " + " ".join(shown))
    return "  ".join(parts + [f"{seconds:.1f} s"])


def train_reward_model(cfg: RMTrainConfig) -> dict:
    """Train, save the model and tokenizer to `cfg.out` with metrics.json, and return the metrics."""
    started = time.monotonic()
    torch.manual_seed(cfg.seed)
    records = load_records(cfg)
    train, held = split_by_prompt(records, cfg.held_out, cfg.seed)
    model, tokenizer = build_reward_model(cfg, records)
    device = torch.device(cfg.device)
    model.to(device)
    train_data, held_data = encode(train, tokenizer, model), encode(held, tokenizer, model)
    lr = cfg.lr or (1e-5 if cfg.base else 1e-3)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    steps = cfg.epochs * -(-len(train_data) // cfg.batch_size)
    # cosine to a tenth of lr: the last epochs settle instead of jumping between minima
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda t: 0.1 + 0.45 * (1 + math.cos(math.pi * t / steps)))
    gen = torch.Generator().manual_seed(cfg.seed)
    kind = kind_of(records)
    print(f"[train-rm] {kind}: {len(train)} to train on, {len(held)} held out; "
          f"{sum(p.numel() for p in model.parameters()):,} parameters; lr {lr:g}", flush=True)
    initial = evaluate(model, held_data, cfg.batch_size, device)
    print(_line(0, None, initial, time.monotonic() - started), flush=True)
    epochs = []
    for epoch in range(1, cfg.epochs + 1):
        loss = train_epoch(model, optimizer, schedule, train_data, cfg.batch_size, gen, device)
        result = evaluate(model, held_data, cfg.batch_size, device)
        epochs.append({"epoch": epoch, "loss": loss, "held_out": result, "seconds": time.monotonic() - started})
        print(_line(epoch, loss, result, time.monotonic() - started), flush=True)
    out = Path(cfg.out)
    save_classifier(model.cpu(), out)
    tokenizer.save(out)
    metrics = {"kind": kind, "train_records": len(train), "held_out_records": len(held), "lr": lr,
               "initial": initial, "epochs": epochs, "held_out": epochs[-1]["held_out"],
               "seconds": time.monotonic() - started, "config": dataclasses.asdict(cfg)}
    (out / "metrics.json").write_text(json.dumps(metrics, indent=2))
    print(f"[train-rm] saved to {out} ({metrics['seconds']:.1f} s)", flush=True)
    return metrics


HELP = {"epochs": "passes over the training records", "lr": "AdamW learning rate (0: 1e-3 fresh, 1e-5 from --base)",
        "batch_size": "records (pairs or scored completions) per step", "seed": "init, split, shuffling, demo data",
        "held_out": "fraction of the prompts held out for evaluation", "demo_pairs": "pairs of --data demo"}
EPILOG = """data: JSONL lines {"prompt", "chosen", "rejected"} (pairs, Bradley-Terry loss) or {"prompt",
"completion", "score"} (regression, MSE); the kind is told by the keys. A fresh model (no --base)
is sized by the architecture flags and gets a character tokenizer over the data's characters."""


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register `tempering train-rm` on the CLI's subparsers."""
    d = RMTrainConfig(data=("demo",), out="-")
    p = subparsers.add_parser("train-rm", help="train a scalar reward model from preference pairs or scores",
                              description="Train a scalar reward model; writes an HF-layout folder with "
                              "tokenizer.json and metrics.json.", epilog=EPILOG,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", nargs="+", required=True, help="JSONL files of pairs or of scores, or 'demo'")
    p.add_argument("--out", default="", help="folder for the reward model")
    p.add_argument("--base", default="", help="HF folder: a causal LM (new score head) or a reward model")
    for name in ("epochs", "lr", "batch_size", "seed", "held_out", "demo_pairs", "hidden_size",
                 "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                 "max_position_embeddings"):
        default = getattr(d, name)
        p.add_argument("--" + name.replace("_", "-"), type=type(default), default=default,
                       help=f"{HELP.get(name, 'size of a fresh model')} (default {default})")
    p.add_argument("--demo-domains", default=",".join(d.demo_domains), help="domains of --data demo, comma-separated")
    p.add_argument("--write-demo-data", default="", help="write --data demo's pairs to this JSONL file "
                   "(and train only when --out is given)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=0,
                   help="torch threads (0: 1 for a fresh model, torch's default with --base)")
    p.set_defaults(handler=run_train_rm)


def run_train_rm(args: argparse.Namespace, _: list[str]) -> int:
    # a fresh (demo-sized) model runs 2-3x slower on two threads than on one when other work
    # shares the cores (measured on the 2-core machine); a --base model gets torch's default
    threads = args.threads or (0 if args.base else 1)
    if threads:
        torch.set_num_threads(threads)
    fields = {f.name for f in dataclasses.fields(RMTrainConfig)}
    values = {k: v for k, v in vars(args).items() if k in fields}
    cfg = RMTrainConfig(**{**values, "data": tuple(args.data),
                           "demo_domains": tuple(x for x in args.demo_domains.split(",") if x)})
    if cfg.write_demo_data:
        if cfg.data != ("demo",):
            raise UserError("--write-demo-data: only with --data demo")
        write_records(load_records(cfg), cfg.write_demo_data)
        print(f"[train-rm] wrote {cfg.demo_pairs} demo pairs to {cfg.write_demo_data}", flush=True)
        if not cfg.out:
            return 0
    train_reward_model(cfg)
    return 0
