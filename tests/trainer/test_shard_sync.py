"""Weight sync from a sharded trainer (gloo on CPU): every rank of a tp=2 x dp=2 mesh writes
only its own shards, together one copy of the model, and an engine assembles them into the
trained weights (the oracle: the same model gathered whole); the version moves on and the
files of the one before go."""

from __future__ import annotations

from pathlib import Path

import torch

from test_fsdp import ARCH, _full_weights, _spawn
from tempering.config import ParallelizeConfig
from tempering.engine import LLM
from tempering.models import build_model
from tempering.weights.layout import distinct
from tempering.weights.shards import Piece, ShardSource, assemble


def _publish(ranks, out: Path) -> None:
    from tempering.weights.shards import ShardPublisher

    model = ranks.shard(build_model(ARCH, seed=3))
    publisher = ShardPublisher(out / "weights")
    publisher.publish(model, 1)
    with torch.no_grad():
        for p in model.parameters():
            p.to_local().mul_(2.0)  # a "step": every shard changes
    publisher.publish(model, 2)
    torch.save({"bytes": publisher.stats.bytes, "full": _full_weights(model)}, out / f"rank{ranks.rank}.pt")


def test_ranks_publish_their_shards_and_an_engine_assembles_them(tmp_path):
    _spawn(_publish, tmp_path, 4, ParallelizeConfig(tp=2, dp_shard=2))
    source = ShardSource(tmp_path / "weights")
    assert source.version == 2 and not (tmp_path / "weights" / "v1").exists()
    full = torch.load(tmp_path / "rank0.pt")["full"]
    one_copy = sum(t.nbytes for t in distinct(build_model(ARCH).state_dict()).values())  # the tied head once
    published = [torch.load(tmp_path / f"rank{r}.pt")["bytes"] for r in range(4)]  # over the 2 publishes
    assert sum(published) == 2 * one_copy and max(published) < one_copy  # each rank: its shards only

    engine = LLM(build_model(ARCH, seed=9), max_seq_len=32, version=-1)
    assert source.pull(engine) and engine.version == 2 and not source.pull(engine)
    loaded = engine.model.state_dict()
    for name, t in full.items():
        assert torch.equal(loaded[name], t), name
    assert not torch.equal(loaded["model.norm.weight"], build_model(ARCH, seed=3).model.norm.weight)


def test_pieces_that_do_not_tile_a_tensor_are_refused():
    whole = torch.arange(6.0).view(2, 3)
    assert torch.equal(assemble([Piece("w", (2, 3), (0, 0), whole[:1]), Piece("w", (2, 3), (1, 0), whole[1:])])["w"],
                       whole)
    try:
        assemble([Piece("w", (2, 3), (0, 0), whole[:1])])
    except AssertionError as e:
        assert "do not tile" in str(e)
    else:
        raise AssertionError("a missing piece went unnoticed")
