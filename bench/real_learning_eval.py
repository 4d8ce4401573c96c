"""Tasks and the one evaluator of bench/real_learning.py: the same for both arms.

- `heldout(domains, per_domain, seed)`: held-out tasks named as `tempering tasks score` names
  them, by (domain, seed): `oracle.draw(domain, 1, seed)` for seeds counted up from `seed`,
  kept when the pool's hash puts the task in the held-out split (which neither arm trains on).
- `training_tasks(domains, per_domain, seed)`: training-split tasks as the pool makes them
  (`pool.TaskDraw(...).make()`), for the TRL arm's dataset (Tempering's run draws its own).
- `evaluate(base, adapter, tasks, ...)`: the base HF folder with a PEFT-layout adapter folded in
  (Tempering's checkpoints' `adapter/` and TRL's `save_pretrained` write the same layout), one
  greedy completion per task by Tempering's engine (`<|im_end|>` ends it), each scored by
  `oracle.Scorer` with the config's [reward]: the reward `tempering tasks score` gives. A
  task's accuracy is its `outcome` component, as the run's own held-out evaluation counts it.
  The answers are written as an `--answers` file, so `tempering tasks score --answers FILE`
  scores them again.
- `train_reward(rows, completions, cfg_path)`: the TRL arm's reward, the same Scorer's total.
"""

from __future__ import annotations

import json
import random
from collections import defaultdict
from pathlib import Path
from typing import Sequence

from tempering.config import load_config
from tempering.oracle import Scorer, draw
from tempering.pool import TaskDraw, is_heldout
from tempering.records import Task
from tempering.tasks import get_domain

SEED_STRIDE = 1_000_000  # each domain's held-out seeds are counted up from seed + i x this


def heldout(domains: Sequence[str], per_domain: int, seed: int, skip: Sequence[dict] = ()) -> list[dict]:
    """`per_domain` held-out tasks of each domain as {domain, seed, id, prompt, answer}; tasks
    whose id is in `skip` are passed over (a sweep's set apart from the held-out one)."""
    taken = {row["id"] for row in skip}
    out = []
    for i, name in enumerate(domains):
        domain, s, got = get_domain(name), seed + i * SEED_STRIDE, 0
        while got < per_domain:
            (task,) = draw(domain, 1, s)
            if is_heldout(task) and task.id not in taken:
                out.append({"domain": name, "seed": s, "id": task.id, "prompt": task.prompt, "answer": task.answer})
                taken.add(task.id)
                got += 1
            s += 1
    return out


def task_of(row: dict) -> Task:
    """A held-out row's task, drawn again as `tempering tasks score` draws it."""
    (task,) = draw(get_domain(row["domain"]), 1, row["seed"])
    return task


def training_tasks(domains: Sequence[str], per_domain: int, seed: int) -> list[dict]:
    """Training-split tasks, domains interleaved: {domain, seed, messages}."""
    rng, out = random.Random(seed), []
    for _ in range(per_domain):
        for name in domains:
            s = rng.getrandbits(63)
            task = TaskDraw(name, None, s).make()
            out.append({"domain": name, "seed": s, "messages": [{"role": m.role, "content": m.content}
                                                                for m in task.messages]})
    return out


def train_reward(rows: Sequence[dict], completions: Sequence[str], cfg_path: str) -> list[float]:
    """The reward training computes for each completion of its row's training task (0 when the
    verifier failed)."""
    cfg = load_config(cfg_path)
    tasks = [TaskDraw(r["domain"], None, r["seed"]).make() for r in rows]
    with Scorer(tasks, completions, cfg.sandbox, cfg.reward, workers=1) as scorer:
        rewards = [scorer.score(t, [c])[0] for t, c in zip(tasks, completions)]
    return [0.0 if r.failed else float(r.total) for r in rewards]


def merged_model(base: str, adapter: str | None):
    """The base HF folder's model with the PEFT-layout adapters of `adapter` folded in."""
    import torch

    from tempering.models import load_hf
    from tempering.models.lora import adapters, apply_lora, load_peft

    model = load_hf(base)
    if adapter is None:
        return model.eval()
    cfg = json.loads((Path(adapter) / "adapter_config.json").read_text())
    apply_lora(model, cfg["r"], cfg["lora_alpha"], cfg["target_modules"])
    load_peft(model, adapter)
    with torch.no_grad():
        for name, m in adapters(model).items():
            m.base.weight.copy_(m.merged_weight())
            parent, _, leaf = name.rpartition(".")
            setattr(model.get_submodule(parent), leaf, m.base)
    return model.eval()


def evaluate(base: str, adapter: str | None, rows: Sequence[dict], cfg_path: str, max_tokens: int,
             answers_file: Path | None = None) -> dict:
    """Greedy held-out accuracy of `base` (+ `adapter`): {"mean", "per_domain", "answers"}."""
    from tempering.engine import LLM, SamplingParams
    from tempering.tokenizer import load_tokenizer

    cfg = load_config(cfg_path)
    tok = load_tokenizer(base)
    tasks = [task_of(r) for r in rows]
    llm = LLM(merged_model(base, adapter), tok, max_seq_len=cfg.engine.max_seq_len, dtype=cfg.engine.dtype)
    prompts = [tok.encode_prompt(t.prompt, t.messages) for t in tasks]
    outs = llm.generate(prompts, SamplingParams(temperature=0.0, max_tokens=max_tokens))
    texts = [o.outputs[0].text for o in outs]
    by_domain: dict[str, list[float]] = defaultdict(list)
    with Scorer(tasks, texts, cfg.sandbox, cfg.reward, workers=1) as scorer:
        for t, text in zip(tasks, texts):
            r, _ = scorer.score(t, [text])
            by_domain[t.domain].append(0.0 if r.failed else float(r.outcome))
    if answers_file is not None:
        answers_file.write_text("".join(json.dumps({"domain": r["domain"], "seed": r["seed"], "answer": x}) + "\n"
                                        for r, x in zip(rows, texts)))
    per_domain = {d: sum(v) / len(v) for d, v in by_domain.items()}
    scores = [x for v in by_domain.values() for x in v]
    return {"mean": sum(scores) / len(scores), "per_domain": per_domain, "answers": texts}
