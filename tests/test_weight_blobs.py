"""Weights through the runtime's blobs (`weights.blobs`), on the local runtime (the Ray path is
exercised end to end in tests/runtime/test_train_ray.py): a new replica hears of the version
published last, a receiver keeps only the newest, publish waits for no replica, a dropped
replica hears nothing more."""

import time

import torch

from tempering.engine import LLM
from tempering.models import Arch, build_model
from tempering.runtime import LocalRuntime
from tempering.weights import BlobPublisher, WeightPublisher, WeightSource

ARCH = Arch(vocab_size=30, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
            num_key_value_heads=1, tie_word_embeddings=True, max_position_embeddings=64)
LONG = 60


def _until_version(receiver, version):
    deadline = time.monotonic() + LONG
    while receiver.version < version:
        assert time.monotonic() < deadline, f"version {version} never arrived (at {receiver.version})"
        time.sleep(0.01)


def test_replicas_load_the_newest_published_version_and_publish_waits_for_none():
    trainer = build_model(ARCH, seed=1)
    publisher = BlobPublisher(LocalRuntime(), timeout_s=LONG)
    assert isinstance(publisher, WeightPublisher) and publisher.version == -1
    publisher.publish(trainer, 0)
    receiver = publisher.channel("rollout-0").open()  # joins after version 0: hears of it at once
    silent = publisher.channel("rollout-1")  # never opened: a replica that does not read
    assert isinstance(receiver, WeightSource)
    try:
        engine = LLM(build_model(ARCH, seed=2), max_seq_len=64, version=-1)
        _until_version(receiver, 0)
        assert receiver.pull(engine) and engine.version == 0 and not receiver.pull(engine)
        for version in (1, 2, 3):
            with torch.no_grad():
                trainer.model.embed_tokens.weight.add_(1.0)
            publisher.publish(trainer, version)  # returns although rollout-1 reads nothing
        _until_version(receiver, 3)
        fetched = receiver.fetch_s
        assert fetched > 0  # the downloads, timed in the receiver's thread
        assert receiver.pull(engine) and engine.version == 3 and receiver.fetch_s == fetched  # a load fetches nothing
        for name, tensor in trainer.state_dict().items():
            assert torch.equal(engine.model.state_dict()[name], tensor), name
        assert publisher.stats.publishes == 4 and publisher.stats.bytes > 0
        publisher.drop("rollout-1")
        assert "rollout-1" not in publisher.channels and silent.queue.try_get(0.2) == (False, None)
    finally:
        receiver.close()
