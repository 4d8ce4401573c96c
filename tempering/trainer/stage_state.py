"""A pipeline's stages as one model: what each stage holds (weights, optimizer state, reference)
gathered into the single-process form on the pipeline's first rank, and a stage's share of that form.

After `pipeline.cut_stage` every stage keeps its parameters' plain names, so the full model is the
union of the stages' state dicts. A tied head is two copies in a pipeline (the embedding on the
first stage, `lm_head.weight` on the last); the copy is left out of what is gathered (it crosses
once) and the full form gets `lm_head.weight` back as the embedding, as a tied model's
`state_dict` has it. The optimizer's state is keyed by parameter name here, as
torch.distributed.checkpoint's full state dicts are (`group` turns that into the single-process
indices); the last stage's copy takes the embedding's state (they step alike: `sync_tied_grads`).
Every function that gathers is a collective of the pipeline's ranks ("pp" of the mesh).
`named_state` / `indexed_state` turn a single-process trainer's state (the optimizer's keyed by
parameter index) into that form and back.
"""

from __future__ import annotations

import copy

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor

from tempering.models import Decoder
from tempering.trainer.parallelize import Ranks
from tempering.trainer.pipeline import is_pipeline_copy
from tempering.trainer.step import Trainer

EMBED, HEAD = "model.embed_tokens.weight", "lm_head.weight"


def holds_copy(model: Decoder) -> bool:
    """Whether this stage's `lm_head.weight` is its copy of a tied embedding."""
    return model.lm_head is not None and is_pipeline_copy(model.lm_head.weight)


def stage_tensors(model: Decoder) -> dict[str, torch.Tensor]:
    """This stage's tensors by their plain names, on the CPU, a tied head's copy left out; a stage
    sharded over data-parallel ranks gathered whole (a collective of those ranks)."""
    copied = holds_copy(model)
    return {k: (v.full_tensor() if isinstance(v, DTensor) else v).detach().cpu()
            for k, v in model.state_dict().items() if not (copied and k == HEAD)}


def full_weights(model: Decoder, ranks: Ranks) -> dict[str, torch.Tensor] | None:
    """Every stage's tensors in one state dict of the full model (on the first rank; None elsewhere)."""
    parts = _gather(stage_tensors(model), ranks)
    return None if parts is None else _tied(_union(parts), model.arch.tie_word_embeddings)


def full_state(trainer: Trainer, ranks: Ranks) -> dict[str, dict] | None:
    """The trainer's state in the form `group` gathers from sharded ranks (the optimizer's keyed by
    parameter name; a reference's full weights; the LR schedule), on the first rank; None elsewhere."""
    model = trainer.model
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    opt = trainer.optimizer.state_dict()
    keep = [i for i, n in enumerate(names) if not (n == HEAD and holds_copy(model))]
    mine = {"state": {names[i]: opt["state"][i] for i in keep if i in opt["state"]},
            "param_groups": [{**g, "params": [names[i] for i in g["params"] if i in keep]} for g in opt["param_groups"]],
            "reference": stage_tensors(trainer.reference) if trainer.reference is not None else None}
    parts = _gather(mine, ranks)
    if parts is None:
        return None
    groups = [dict(g) for g in parts[0]["param_groups"]]
    for i, g in enumerate(groups):
        g["params"] = [n for part in parts for n in part["param_groups"][i]["params"]]
    state = {"optimizer": {"state": _union([p["state"] for p in parts]), "param_groups": groups},
             "scheduler": trainer.scheduler.state_dict()}
    if trainer.reference is not None:
        state["reference"] = _tied(_union([p["reference"] for p in parts]), model.arch.tie_word_embeddings)
    return state


def load_stage(trainer: Trainer, ranks: Ranks, state: dict[str, dict]) -> None:
    """This stage's share of a full state (`full_state`'s form, or `group`'s from a single-process
    trainer): its parameters' optimizer state (the copy of a tied head: the embedding's), the LR
    schedule, and a reference cut like the policy."""
    model, opt = trainer.model, state["optimizer"]
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    source = [EMBED if n == HEAD and holds_copy(model) else n for n in names]
    if opt["state"]:  # a fresh optimizer has nothing to restore
        hyper = {k: v for k, v in opt["param_groups"][0].items() if k != "params"}
        trainer.optimizer.load_state_dict({
            "state": {i: copy.deepcopy(opt["state"][n]) for i, n in enumerate(source) if n in opt["state"]},
            "param_groups": [{**hyper, "params": list(range(len(names)))}]})
    trainer.scheduler.load_state_dict(state["scheduler"])
    if "reference" in state and trainer.algo.kl_coef > 0:
        trainer.reference = ranks.frozen_copy(trainer.model)
        own = trainer.reference.state_dict()
        trainer.reference.load_state_dict({k: state["reference"][k] for k in own})


def param_names(model: Decoder) -> list[str]:
    """Parameter names in the order the optimizer holds them (`Trainer` passes model.parameters())."""
    return [name for name, _ in model.named_parameters()]


def named_state(state: dict[str, dict], model: Decoder) -> dict[str, dict]:
    """Single-process trainer state -> the optimizer's keyed by parameter name (as
    torch.distributed.checkpoint's full state dicts are)."""
    if "critic" in state:
        raise ValueError("TrainerGroup: a critic (algorithm.advantage = 'gae') is not sharded")
    names, opt = param_names(model), state["optimizer"]
    optimizer = {"state": {names[i]: s for i, s in opt["state"].items()},
                 "param_groups": [{**g, "params": [names[i] for i in g["params"]]} for g in opt["param_groups"]]}
    return {**state, "optimizer": optimizer}


def indexed_state(state: dict[str, dict], model: Decoder) -> dict[str, dict]:
    """The inverse of `named_state`."""
    index = {name: i for i, name in enumerate(param_names(model))}
    opt = state["optimizer"]
    optimizer = {"state": {index[n]: s for n, s in opt["state"].items()},
                 "param_groups": [{**g, "params": sorted(index[n] for n in g["params"])} for g in opt["param_groups"]]}
    return {**state, "optimizer": optimizer}


def _gather(obj: object, ranks: Ranks) -> list | None:
    """`obj` of every stage, in stage order, on the pipeline's first rank (None on the others)."""
    group = ranks.mesh.get_group("pp")
    first = dist.get_global_rank(group, 0)
    out = [None] * ranks.shape.pp if dist.get_rank() == first else None
    dist.gather_object(obj, out, dst=first, group=group)
    return out


def _union(parts: list[dict]) -> dict:
    out: dict = {}
    for part in parts:
        both = set(out) & set(part)
        assert not both, f"stages hold the same tensors: {sorted(both)[:3]}"
        out.update(part)
    return out


def _tied(weights: dict[str, torch.Tensor], tied: bool) -> dict[str, torch.Tensor]:
    """A tied model's state dict has the head as the embedding, under both names."""
    if tied and EMBED in weights:
        weights[HEAD] = weights[EMBED]
    return weights
