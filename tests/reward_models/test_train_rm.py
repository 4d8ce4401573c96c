"""`tempering train-rm`: the demo RM ranks held-out pairs, BT and regression train, bad data is one
clear error, and the saved folder loads here and in transformers with the same scores."""

from __future__ import annotations

import json
import math
import random

import pytest
import torch

from tempering.cli import main
from tempering.errors import UserError
from tempering.models import Arch, build_model, load_classifier, save_hf
from tempering.reward.preferences import demo_pairs, read_records, split_by_prompt
from tempering.reward.reward_model import RewardScorer, render_text
from tempering.reward.rm_training import RMTrainConfig, bt_loss, train_reward_model
from tempering.tokenizer import char_tokenizer, load_tokenizer

TINY = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1)
TINY_FLAGS = [x for k, v in TINY.items() for x in ("--" + k.replace("_", "-"), str(v))]


@pytest.fixture(scope="module")
def demo_rm(tmp_path_factory):
    """The demo RM at test size: 3,000 pairs, 4 epochs (about 10 s on one core)."""
    out = tmp_path_factory.mktemp("rm")
    cfg = RMTrainConfig(data=("demo",), out=str(out), demo_pairs=3000, epochs=4, held_out=0.15)
    return out, train_reward_model(cfg), cfg


def test_bt_loss_by_hand():
    # -log sigmoid(2) = log(1 + e^-2); -log sigmoid(-1) = log(1 + e)
    loss = bt_loss(torch.tensor([2.0, 0.0]), torch.tensor([0.0, 1.0]))
    expected = (math.log(1 + math.exp(-2)) + math.log(1 + math.e)) / 2
    assert loss.item() == pytest.approx(expected, abs=1e-6)
    assert bt_loss(torch.tensor([0.0]), torch.tensor([0.0])).item() == pytest.approx(math.log(2))


def test_demo_rm_ranks_held_out_pairs_it_never_saw(demo_rm):
    out, metrics, cfg = demo_rm
    assert metrics["kind"] == "pairs" and metrics["initial"]["accuracy"] < 0.7
    assert metrics["held_out"]["accuracy"] >= 0.75, metrics["held_out"]
    train, held = split_by_prompt(demo_pairs(cfg.demo_pairs, cfg.seed), cfg.held_out, cfg.seed)
    assert len(held) == metrics["held_out_records"] and not {p.prompt for p in train} & {p.prompt for p in held}
    # the saved folder, through the scorer RL uses, ranks them the same
    tokenizer = load_tokenizer(out)
    scorer = RewardScorer(load_classifier(out), tokenizer)
    chosen = scorer.score([render_text(tokenizer, p.prompt, p.chosen) for p in held])
    rejected = scorer.score([render_text(tokenizer, p.prompt, p.rejected) for p in held])
    accuracy = sum(c > r for c, r in zip(chosen, rejected)) / len(held)
    assert accuracy == pytest.approx(metrics["held_out"]["accuracy"], abs=0.01)
    assert json.loads((out / "metrics.json").read_text())["held_out"] == metrics["held_out"]


def test_saved_folder_loads_in_transformers_with_the_same_scores(demo_rm):
    transformers = pytest.importorskip("transformers")
    out, _, _ = demo_rm
    tokenizer = load_tokenizer(out)
    texts = ["sort 4721=1247", "sort 4721=4721", "rev abc=cba", "rev abc=ab"]
    ours = RewardScorer(load_classifier(out), tokenizer).score(texts)
    hf = transformers.AutoModelForSequenceClassification.from_pretrained(out).eval()
    rows = [tokenizer.encode_prompt(t) for t in texts]
    ids = torch.full((len(rows), max(map(len, rows))), tokenizer.pad_id)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = torch.tensor(row)
    with torch.no_grad():
        logits = hf(input_ids=ids, attention_mask=(ids != tokenizer.pad_id).long()).logits
    assert logits.shape == (4, 1)
    assert logits[:, 0].tolist() == pytest.approx(ours, abs=1e-4)


def test_regression_trains_toward_the_scores(tmp_path):
    rng = random.Random(0)
    lines = []
    for i in range(1200):
        text = "".join(rng.choice("ab") for _ in range(rng.randint(2, 8)))
        lines.append(json.dumps({"prompt": f"count {i % 300}:", "completion": text, "score": text.count("a") / 4}))
    (tmp_path / "scores.jsonl").write_text("\n".join(lines) + "\n")
    cfg = RMTrainConfig(data=(str(tmp_path / "scores.jsonl"),), out=str(tmp_path / "rm"), epochs=3, held_out=0.2,
                        **TINY)
    metrics = train_reward_model(cfg)
    assert metrics["kind"] == "scores"
    held = metrics["held_out"]
    assert held["correlation"] >= 0.8 and held["mse"] < 0.5 * metrics["initial"]["mse"], held


@pytest.mark.parametrize("bad, words", [
    ('{"prompt": "p", "chosen": "a"}', ["missing key 'rejected'"]),
    ('{"prompt": "p", "chosen": "a", "rejected": 3}', ["key 'rejected' must be a string"]),
    ('{"prompt": "p", "chosen": "a", "rejected": "b"', ["not valid JSON"]),
    ('["p", "a", "b"]', ["expected a JSON object"]),
    ('{"prompt": "p", "completion": "a", "score": 1}', ["a record of scores", "line 1"]),
    ('{"prompt": "p", "answer": "a"}', ["neither"]),
])
def test_a_bad_line_names_file_line_and_key(tmp_path, bad, words):
    path = tmp_path / "pairs.jsonl"
    path.write_text('{"prompt": "p", "chosen": "a", "rejected": "b"}\n\n' + bad + "\n")
    with pytest.raises(UserError) as e:
        read_records(path)
    assert f"{path}:3: " in str(e.value)
    for w in words:
        assert w in str(e.value)


def test_a_score_must_be_a_number(tmp_path):
    path = tmp_path / "scores.jsonl"
    path.write_text('{"prompt": "p", "completion": "a", "score": true}\n')
    with pytest.raises(UserError, match=r"scores.jsonl:1: key 'score' must be a finite number"):
        read_records(path)


def test_a_text_longer_than_the_context_is_refused_naming_its_record(tmp_path):
    path = tmp_path / "pairs.jsonl"
    path.write_text('{"prompt": "p", "chosen": "a", "rejected": "b"}\n'
                    '{"prompt": "q", "chosen": "%s", "rejected": "b"}\n' % ("a" * 40))
    cfg = RMTrainConfig(data=(str(path),), out=str(tmp_path / "rm"), held_out=0.0, max_position_embeddings=16, **TINY)
    with pytest.raises(UserError, match=r"pairs.jsonl:2: a text of 41 tokens is longer than the reward model's "
                                        r"context of 16"):
        train_reward_model(cfg)


def test_cli_writes_demo_data_trains_from_it_and_reports_bad_data(tmp_path, capsys):
    data = tmp_path / "demo.jsonl"
    assert main(["train-rm", "--data", "demo", "--demo-pairs", "60", "--write-demo-data", str(data)]) == 0
    first = json.loads(data.read_text().splitlines()[0])
    assert set(first) == {"prompt", "chosen", "rejected"}
    assert [(p.prompt, p.chosen, p.rejected) for p in read_records(data)] == \
        [(p.prompt, p.chosen, p.rejected) for p in demo_pairs(60, 0)]
    out = tmp_path / "rm"
    assert main(["train-rm", "--data", str(data), "--out", str(out), "--epochs", "1", *TINY_FLAGS]) == 0
    assert "held-out" in capsys.readouterr().out
    assert {"config.json", "model.safetensors", "tokenizer.json", "metrics.json"} <= {p.name for p in out.iterdir()}
    data.write_text(data.read_text() + '{"prompt": "sort 12=", "chosen": "12"}\n')
    assert main(["train-rm", "--data", str(data), "--out", str(out)]) == 2
    assert capsys.readouterr().err.strip() == f"error: {data}:61: missing key 'rejected'"
    assert main(["train-rm", "--data", "demo", "--out", str(out), "--held-out", "1"]) == 2
    assert "--held-out" in capsys.readouterr().err


def test_base_causal_lm_gets_a_new_head_and_a_classifier_keeps_its_own(tmp_path, demo_rm):
    pairs = tmp_path / "pairs.jsonl"
    main(["train-rm", "--data", "demo", "--demo-pairs", "200", "--seed", "7", "--write-demo-data", str(pairs)])
    tokenizer = char_tokenizer("0123456789abcdefghorstv =")
    lm = tmp_path / "lm"
    causal = build_model(Arch(vocab_size=tokenizer.vocab_size, **TINY, max_position_embeddings=64), seed=3)
    save_hf(causal, lm)
    tokenizer.save(lm)
    out = tmp_path / "from-lm"
    metrics = train_reward_model(RMTrainConfig(data=(str(pairs),), out=str(out), base=str(lm), epochs=1))
    assert metrics["lr"] == 1e-5
    model = load_classifier(out)
    assert model.num_labels == 1 and model.arch.pad_token_id == tokenizer.pad_id  # set so transformers batches it
    # the body is the LM's, moved a little by one epoch at 1e-5
    assert torch.allclose(model.model.embed_tokens.weight, causal.model.embed_tokens.weight, atol=1e-3)
    # the demo RM as base: its trained head is kept, so it ranks before any training
    metrics = train_reward_model(RMTrainConfig(data=(str(pairs),), out=str(tmp_path / "again"), base=str(demo_rm[0]),
                                               epochs=1, held_out=0.5))
    assert metrics["initial"]["accuracy"] >= 0.7
