"""Weights over a torch.distributed broadcast group (gloo): 2 engine replicas in spawned processes
end up with the trainer's weights, version by version, and generate what the trainer's model
generates; a replica that never joins is a stall naming it; a replica with
another model and a header that does not match are errors naming the replica on both sides.

The trainer runs in the test process; the oracle is its model (its tensors and a plain greedy
decode over full-sequence attention, no engine involved)."""

from __future__ import annotations

import dataclasses
import queue
import time
import traceback
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as tmp

from tempering.engine import LLM, SamplingParams
from tempering.models import Arch, Decoder, build_model
from tempering.runtime import Stall
from tempering.weights import (BroadcastPublisher, BroadcastReceiver, EngineSync, WeightPublisher, WeightSource,
                               WeightStore, WeightSyncError)
from tempering.weights.broadcast import header_problem
from tempering.weights.layout import Layout

ARCH = Arch(vocab_size=50, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, tie_word_embeddings=True, max_position_embeddings=64)
PROMPT = [3, 14, 15, 9, 2, 6]
NEW = 10
GREEDY = SamplingParams(temperature=0, max_tokens=NEW, ignore_eos=True)
VERSIONS = (1, 2, 3)
DEADLINE_S = 60.0  # any one wait here; a hang ends at it, not in CI's timeout


def _model(seed: int) -> Decoder:
    """Weights large enough that greedy generation varies from token to token and seed to seed."""
    model = Decoder(ARCH)
    model.init_weights(torch.Generator().manual_seed(seed), std=0.5)
    return model.eval()


def _replica(group, rank: int, reports, out: Path) -> None:
    """One engine replica: load each version as it arrives, report its weights and generation."""
    torch.set_num_threads(1)
    receiver = None
    try:
        engine = LLM(_model(100 + rank), max_seq_len=64, version=-1)  # not the trainer's weights
        receiver = BroadcastReceiver(group, rank, engine.model)
        sync = EngineSync(receiver, engine, partial=True)
        deadline = time.monotonic() + DEADLINE_S
        while engine.version < VERSIONS[-1]:
            if time.monotonic() > deadline:
                raise Stall(f"replica {rank}: at version {engine.version} after {DEADLINE_S} s")
            if not sync.poll():
                time.sleep(0.005)
                continue
            c = engine.generate([PROMPT], GREEDY)[0].outputs[0]
            path = out / f"r{rank}-v{engine.version}.pt"
            torch.save({"state": engine.model.state_dict(), "tokens": c.token_ids, "versions": c.versions}, path)
            reports.put((rank, engine.version, dataclasses.asdict(sync.stats)))
    except BaseException:
        (out / f"r{rank}.err").write_text(traceback.format_exc())
        raise
    finally:
        if receiver is not None:
            receiver.close()


def _greedy(model, prompt: list[int], n: int) -> list[int]:
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(n):
            ids.append(int(model(torch.tensor([ids]))[0, -1].argmax()))
    return ids[len(prompt):]


def _report(reports, procs, out: Path):
    """The next report, within the deadline; a replica that died says why."""
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        try:
            return reports.get(timeout=0.2)
        except queue.Empty:
            for p in procs:
                if not p.is_alive() and p.exitcode:
                    errors = "".join(f.read_text() for f in out.glob("*.err"))
                    pytest.fail(f"a replica died (exit {p.exitcode}):\n{errors}")
    pytest.fail(f"no replica report within {DEADLINE_S} s")


def test_two_replicas_get_each_version_and_generate_as_the_trainer(tmp_path):
    models = {v: _model(v) for v in VERSIONS}
    publisher = BroadcastPublisher(models[1], replicas=2, timeout_s=DEADLINE_S)
    ctx = tmp.get_context("spawn")
    reports = ctx.Queue()
    procs = [ctx.Process(target=_replica, args=(publisher.group, r, reports, tmp_path), daemon=True) for r in (1, 2)]
    for p in procs:
        p.start()
    try:
        for v in VERSIONS:
            publisher.publish(models[v], v)
            got = dict((rank, (version, stats)) for rank, version, stats in
                       (_report(reports, procs, tmp_path) for _ in procs))
            assert {rank: version for rank, (version, _) in got.items()} == {1: v, 2: v}
        for p in procs:
            p.join(DEADLINE_S)
            assert p.exitcode == 0, "".join(f.read_text() for f in tmp_path.glob("*.err"))
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
        publisher.close()

    oracle = {v: _greedy(models[v], PROMPT, NEW) for v in VERSIONS}
    assert len({tuple(t) for t in oracle.values()}) == 3  # each version generates otherwise
    for rank in (1, 2):
        for v in VERSIONS:
            saved = torch.load(tmp_path / f"r{rank}-v{v}.pt")
            trainer_state = models[v].state_dict()
            assert saved["state"].keys() == trainer_state.keys()
            for name, tensor in trainer_state.items():
                assert torch.equal(saved["state"][name], tensor), (rank, v, name)
            assert saved["tokens"] == oracle[v] and saved["versions"] == [v] * NEW
        stats = got[rank][1]
        assert stats["syncs"] == 3 and stats["bytes"] == 3 * publisher.layout.nbytes and stats["pull_s"] > 0
    assert publisher.version == 3 and publisher.stats.publishes == 3
    assert publisher.stats.bytes == 3 * publisher.layout.nbytes and publisher.stats.mb_per_s > 0


def test_a_replica_that_never_joins_is_a_stall_naming_it():
    model = build_model(ARCH, seed=0)
    publisher = BroadcastPublisher(model, replicas=2, timeout_s=1.0)
    present = BroadcastReceiver(publisher.group, 1, build_model(ARCH, seed=1))  # joined when this returns
    try:
        with pytest.raises(Stall, match=r"^weight sync: replica 2 did not join within 1 s$"):
            publisher.publish(model, 1)
        assert present.version == -1
    finally:
        present.close()
        publisher.close()


def test_a_replica_with_another_model_is_refused_on_both_sides():
    model = build_model(ARCH, seed=0)
    publisher = BroadcastPublisher(model, replicas=1, timeout_s=DEADLINE_S)
    other = build_model(dataclasses.replace(ARCH, intermediate_size=48), seed=1)
    receiver = BroadcastReceiver(publisher.group, 1, other)
    try:
        expected = (r"weight sync: replica 1's model does not match the trainer's: replica 1 has "
                    r"'model.layers.0.mlp.gate_proj.weight \[48, 32\] float32' where the trainer has "
                    r"'model.layers.0.mlp.gate_proj.weight \[64, 32\] float32'")
        with pytest.raises(WeightSyncError, match=expected):
            publisher.publish(model, 1)
        with pytest.raises(WeightSyncError, match=expected):  # the group is not used again
            publisher.publish(model, 2)
        receiver._thread.join(DEADLINE_S)  # it ends once it has read the trainer's verdict
        with pytest.raises(WeightSyncError, match=expected):
            receiver.version
    finally:
        receiver.close()
        publisher.close()


def test_a_header_that_does_not_match_is_an_error_on_both_sides():
    # trainer and replica in this process (the replica receives in its own thread)
    model = build_model(ARCH, seed=0)
    publisher = BroadcastPublisher(model, replicas=1, timeout_s=DEADLINE_S)
    engine = LLM(build_model(ARCH, seed=1), max_seq_len=64, version=-1)
    receiver = BroadcastReceiver(publisher.group, 1, engine.model)
    try:
        publisher.publish(model, 1)
        assert receiver.version == 1 and receiver.pull(engine) and engine.version == 1
        publisher.layout.fingerprint = "f" * 16  # as if the trainer's buckets were laid out otherwise
        with pytest.raises(WeightSyncError, match=r"^weight sync: replica 1: header of version 2 does not match: "
                                                  r"layout fingerprint \d+ \(expected \d+\)$"):
            publisher.publish(model, 2)
        with pytest.raises(WeightSyncError, match="replica 1: header of version 2 does not match"):
            receiver.pull(engine)
        assert engine.version == 1
    finally:
        receiver.close()
        publisher.close()


def test_header_problem_names_every_field_that_differs():
    layout = Layout(build_model(ARCH).state_dict(), 1 << 20)
    good = [4, 7, layout.fingerprint_int, layout.numel]
    assert header_problem(good, 4, 7, layout) is None
    assert header_problem([5, 8, *good[2:]], 4, 7, layout) == \
        "header of version 8 does not match: publish number 5 (expected 4), version 8 (expected 7)"
    assert "elements 3 (expected" in header_problem([*good[:3], 3], 4, 7, layout)


def test_both_sides_are_the_protocols_and_ties_and_buckets_are_laid_out_once():
    model = build_model(ARCH, seed=0)
    store = WeightStore(model, tmp.get_context("spawn"))
    assert isinstance(store, WeightPublisher) and isinstance(store, WeightSource)
    publisher = BroadcastPublisher(model, replicas=1, timeout_s=5.0, bucket_bytes=16 << 10)
    receiver = BroadcastReceiver(publisher.group, 1, build_model(ARCH, seed=1))
    try:
        assert isinstance(publisher, WeightPublisher) and isinstance(receiver, WeightSource)
        names = [s.name for s in publisher.layout.slots]
        assert "lm_head.weight" not in names and names == list(store.tensors)  # tied: sent once
        assert publisher.layout.nbytes == store.nbytes
        # 16 KiB buckets: more than one, fewer than one per tensor, none over the cap but a lone large tensor
        sizes = [n * 4 for _, n in publisher.layout.buckets]
        assert 1 < len(sizes) < len(names)
        per_bucket = {b: [s for s in publisher.layout.slots if s.bucket == b] for b in range(len(sizes))}
        assert all(size <= 16 << 10 or len(per_bucket[b]) == 1 for b, size in enumerate(sizes))
    finally:
        receiver.close()
        publisher.close()
