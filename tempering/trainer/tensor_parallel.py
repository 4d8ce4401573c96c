"""Tensor parallelism of the plain `Decoder`, applied from outside with torch.distributed.tensor.parallel.

Megatron's plan, as torchtitan writes it: in each block q/k/v and gate/up are split by output
column (each rank holds `heads / tp` query heads, `kv_heads / tp` key/value heads and
`intermediate / tp` MLP columns), o and down by input row, so a block costs two reductions
forward and two backward. Between them the activations are sequence parallel: the norms run on
`1 / tp` of the tokens each (`SequenceParallel`), the row-wise layers reduce-scatter into that
split and the attention and MLP inputs are all-gathered from it. The residual stream stays a
DTensor (it knows its global length, so rows need not split evenly). The embedding is split by
vocabulary (row-wise), and so is the LM head: a tied head is the embedding's own sharded
parameter; the trainer never calls the head as a module (its `head` callable takes the weight,
`vocab_parallel` scores tokens over the vocabulary shards), so the hidden states the body hands
it are gathered whole on every rank. Parameters are all DTensors on the tp mesh afterwards (FSDP2
then shards them further on the data-parallel mesh). Only the module attributes that size views
(`heads`, `kv_heads`) are changed; the forward code is the model's own.
"""

from __future__ import annotations

from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, PrepareModuleOutput,
                                               RowwiseParallel, SequenceParallel, parallelize_module)

from tempering.errors import UserError
from tempering.models import Arch, Decoder


def check_tp(arch: Arch, tp: int) -> None:
    """The model splits evenly over `tp` ranks: heads, key/value heads, MLP columns, vocabulary."""
    sizes = {"num_attention_heads": arch.num_attention_heads, "num_key_value_heads": arch.num_key_value_heads,
             "intermediate_size": arch.intermediate_size, "vocab_size": arch.vocab_size}
    uneven = [f"{name} = {n}" for name, n in sizes.items() if n % tp]
    if uneven:
        raise UserError(f"trainer.parallelize.tp = {tp} does not divide the model's {', '.join(uneven)}")


def apply_tp(model: Decoder, mesh: DeviceMesh) -> Decoder:
    """Split `model` over the 1-D `mesh` in place (the same module comes back)."""
    tp = mesh.size()
    check_tp(model.arch, tp)
    tied = model.lm_head.weight is model.model.embed_tokens.weight
    parallelize_module(model.model, mesh, {
        "embed_tokens": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1), use_local_output=False),
        # the body's output (the final norm's, split by token) whole on every rank, for the head
        "norm": SequenceParallel(),
    })
    parallelize_module(model.model, mesh, PrepareModuleOutput(output_layouts=Shard(1), desired_output_layouts=Replicate(),
                                                              use_local_output=True))
    for block in model.model.layers:
        parallelize_module(block, mesh, {
            "input_layernorm": SequenceParallel(),
            "self_attn": PrepareModuleInput(input_layouts=(Shard(1), None, None, None),
                                            desired_input_layouts=(Replicate(), None, None, None)),
            "self_attn.q_proj": ColwiseParallel(),
            "self_attn.k_proj": ColwiseParallel(),
            "self_attn.v_proj": ColwiseParallel(),
            "self_attn.o_proj": RowwiseParallel(output_layouts=Shard(1), use_local_output=False),
            "post_attention_layernorm": SequenceParallel(),
            "mlp": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
            "mlp.gate_proj": ColwiseParallel(),
            "mlp.up_proj": ColwiseParallel(),
            "mlp.down_proj": RowwiseParallel(output_layouts=Shard(1), use_local_output=False),
        })
        # the views in attention's forward are sized by these: each rank has its share of the heads
        block.self_attn.heads //= tp
        block.self_attn.kv_heads //= tp
    if tied:  # the embedding's sharded parameter, split by vocabulary as a column-wise head's would be
        model.lm_head.weight = model.model.embed_tokens.weight
    else:
        parallelize_module(model, mesh, {"lm_head": ColwiseParallel(output_layouts=Shard(-1), use_local_output=False)})
    return model
