"""Versioned weights in shared memory: publish, pull once per version, tied tensors stored once;
a pull with nothing new takes no lock; `rollout.partial_rollouts` in the config."""

import threading

import pytest
import torch
import torch.multiprocessing as tmp

from tempering.config import ConfigError, RolloutConfig, load_config
from tempering.engine import LLM, SamplingParams
from tempering.models import Arch, build_model
from tempering.weights import WeightStore

ARCH = Arch(vocab_size=30, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
            num_key_value_heads=1, tie_word_embeddings=True, max_position_embeddings=64)


def test_publish_then_pull_once_per_version():
    trainer_model, engine_model = build_model(ARCH, seed=1), build_model(ARCH, seed=2)
    store = WeightStore(trainer_model, tmp.get_context("spawn"))
    assert "lm_head.weight" not in store.tensors  # tied to the embedding: one copy
    engine = LLM(engine_model, max_seq_len=64, version=-1)  # below any published version
    store.publish(trainer_model, 3)
    assert store.pull(engine) and engine.version == 3
    for name, tensor in trainer_model.state_dict().items():
        assert torch.equal(engine_model.state_dict()[name], tensor), name
    assert not store.pull(engine)  # nothing newer

    with torch.no_grad():
        trainer_model.model.embed_tokens.weight.add_(1.0)
    assert not store.pull(engine)  # changed but not published: the engine keeps version 3
    store.publish(trainer_model, 4)
    assert store.pull(engine)
    assert torch.equal(engine_model.lm_head.weight, trainer_model.model.embed_tokens.weight)
    out = engine.generate([[1, 2, 3]], SamplingParams(temperature=0, max_tokens=2, ignore_eos=True))
    assert out[0].outputs[0].versions == [4, 4]


def test_a_pull_with_nothing_new_takes_no_lock_and_copies_nothing():
    model = build_model(ARCH, seed=1)
    store = WeightStore(model, tmp.get_context("spawn"))
    engine = LLM(build_model(ARCH, seed=2), max_seq_len=64, version=-1)
    store.publish(model, 0)
    assert store.pull(engine)
    loads = []
    engine.load_weights = lambda *a: loads.append(a)
    store._lock.acquire()  # as if the trainer were copying: a pull that needed the lock would wait here
    try:
        t = threading.Thread(target=lambda: [store.pull(engine) for _ in range(1000)])
        t.start()
        t.join(timeout=10)
        assert not t.is_alive() and not loads
    finally:
        store._lock.release()


def test_partial_rollouts_is_a_boolean_in_the_rollout_section(tmp_path):
    assert RolloutConfig().partial_rollouts is True
    assert load_config(None, ["--rollout.partial_rollouts=false"]).rollout.partial_rollouts is False
    (tmp_path / "c.toml").write_text("[rollout]\npartial_rollouts = 'no'\n")
    with pytest.raises(ConfigError) as e:
        load_config(tmp_path / "c.toml")
    message = str(e.value)
    assert "rollout.partial_rollouts" in message and "true or false" in message and "\n" not in message
    with pytest.raises(ConfigError, match="rollout.partial_rollouts: expected true or false, got 1"):
        RolloutConfig(partial_rollouts=1)
