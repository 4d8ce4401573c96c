"""`SequenceClassifier` against transformers' *ForSequenceClassification: folders saved here load
there and score the same (right-padded batches and single rows), folders saved there load here,
a causal LM becomes a reward model's base with `new_head`, and a mismatched folder is named."""

from __future__ import annotations

import json

import pytest
import torch
from rm_helpers import PADS, texts, tiny_arch, tokenizer_folder
from safetensors.torch import load_file, save_file

from tempering.errors import UserError
from tempering.models import build_classifier, last_token_index, load_classifier, save_classifier
from tempering.tokenizer import load_tokenizer

transformers = pytest.importorskip("transformers")
ATOL = 1e-5


def right_padded(rows: list[list[int]], pad: int) -> torch.Tensor:
    width = max(len(r) for r in rows)
    return torch.tensor([r + [pad] * (width - len(r)) for r in rows])


def hf_scores(model, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=ids).logits.float()


@pytest.mark.parametrize("model_type, num_labels", [("llama", 1), ("qwen2", 1), ("llama", 3)])
def test_saved_classifier_loads_in_transformers_with_the_same_scores(tmp_path, model_type, num_labels):
    tokenizer_folder(tmp_path, model_type)
    tok = load_tokenizer(tmp_path)
    hf_tok = transformers.AutoTokenizer.from_pretrained(str(tmp_path))
    pad = tok.inner.token_to_id(PADS[model_type])
    ours = build_classifier(tiny_arch(tok.vocab_size, model_type, pad), num_labels, seed=1).eval()
    save_classifier(ours, tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["architectures"] == [f"{'Llama' if model_type == 'llama' else 'Qwen2'}ForSequenceClassification"]
    theirs = transformers.AutoModelForSequenceClassification.from_pretrained(str(tmp_path)).eval()
    assert type(theirs).__name__ == config["architectures"][0] and theirs.config.num_labels == num_labels

    rows = [tok.encode_prompt(t) for t in texts(12, seed=2)]
    assert rows == [hf_tok(t).input_ids for t in texts(12, seed=2)]  # the ids transformers would score
    ids = right_padded(rows, pad)
    with torch.no_grad():
        got = ours(ids)
    assert got.shape == (len(rows), num_labels)
    torch.testing.assert_close(got, hf_scores(theirs, ids), atol=ATOL, rtol=0)
    for i, row in enumerate(rows):  # a row alone scores what it scored in the padded batch
        single = hf_scores(theirs, torch.tensor([row]))
        torch.testing.assert_close(single[0], got[i], atol=ATOL, rtol=0)
    # the position scored: the last real token (pads are never scored)
    assert last_token_index(ids, pad).tolist() == [len(r) - 1 for r in rows]


def test_without_a_pad_id_rows_score_at_their_last_token(tmp_path):
    tokenizer_folder(tmp_path)
    tok = load_tokenizer(tmp_path)
    ours = build_classifier(tiny_arch(tok.vocab_size, pad_token_id=None), 1, seed=3).eval()
    save_classifier(ours, tmp_path)
    theirs = transformers.AutoModelForSequenceClassification.from_pretrained(str(tmp_path)).eval()
    for text in texts(4, seed=4):
        ids = torch.tensor([tok.encode_prompt(text)])
        with torch.no_grad():
            torch.testing.assert_close(ours(ids), hf_scores(theirs, ids), atol=ATOL, rtol=0)


@pytest.mark.parametrize("cls, num_labels", [("LlamaForSequenceClassification", 1),
                                             ("Qwen2ForSequenceClassification", 2)])
def test_a_folder_saved_by_transformers_loads_with_its_scores(tmp_path, cls, num_labels):
    kind = transformers.LlamaConfig if cls.startswith("Llama") else transformers.Qwen2Config
    config = kind(vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=128, pad_token_id=0, num_labels=num_labels)
    torch.manual_seed(5)
    theirs = getattr(transformers, cls)(config).eval()
    theirs.save_pretrained(tmp_path)
    ours = load_classifier(tmp_path).eval()
    assert ours.num_labels == num_labels and ours.arch.pad_token_id == 0
    gen = torch.Generator().manual_seed(6)
    rows = [torch.randint(1, 97, (n,), generator=gen).tolist() for n in (5, 17, 1, 64, 30)]
    ids = right_padded(rows, 0)
    with torch.no_grad():
        torch.testing.assert_close(ours(ids), hf_scores(theirs, ids), atol=ATOL, rtol=0)
    # and back: saved here, loaded there, the same scores
    save_classifier(ours, tmp_path / "again")
    back = transformers.AutoModelForSequenceClassification.from_pretrained(str(tmp_path / "again")).eval()
    torch.testing.assert_close(hf_scores(back, ids), hf_scores(theirs, ids), atol=ATOL, rtol=0)


def test_a_causal_lm_loads_as_a_new_reward_models_base(tmp_path):
    config = transformers.LlamaConfig(vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                                      pad_token_id=0)
    torch.manual_seed(7)
    lm = transformers.LlamaForCausalLM(config).eval()
    lm.save_pretrained(tmp_path)
    with pytest.raises(UserError, match=r"missing \['score.weight'\].*new_head"):
        load_classifier(tmp_path)
    ours = load_classifier(tmp_path, new_head=True, seed=1).eval()
    assert ours.num_labels == 1 and "lm_head.weight" not in ours.state_dict()
    again = load_classifier(tmp_path, new_head=True, seed=1)
    torch.testing.assert_close(again.score.weight, ours.score.weight)  # the new head is seeded
    ids = torch.randint(1, 97, (3, 20), generator=torch.Generator().manual_seed(8))
    with torch.no_grad():  # the body is the causal LM's: same final hidden states
        torch.testing.assert_close(ours.hidden_states(ids), lm.model(ids).last_hidden_state, atol=ATOL, rtol=0)
    # transformers makes the same model from that folder, up to the random head
    theirs = transformers.AutoModelForSequenceClassification.from_pretrained(str(tmp_path), num_labels=1).eval()
    theirs.score.weight.data.copy_(ours.score.weight)
    with torch.no_grad():
        torch.testing.assert_close(ours(ids), hf_scores(theirs, ids), atol=ATOL, rtol=0)


def test_mismatched_folders_name_what_is_wrong(tmp_path):
    model = build_classifier(tiny_arch(50, pad_token_id=0), 2, seed=0)
    save_classifier(model, tmp_path)
    with pytest.raises(UserError, match="2 labels, not 1"):
        load_classifier(tmp_path, num_labels=1)
    state = load_file(tmp_path / "model.safetensors")
    state.pop("model.norm.weight")
    state["extra.weight"] = torch.zeros(2)
    save_file(state, tmp_path / "model.safetensors")
    with pytest.raises(UserError, match=r"missing \['model.norm.weight'\], unexpected \['extra.weight'\]") as e:
        load_classifier(tmp_path)
    assert str(tmp_path) in str(e.value)
    with pytest.raises(UserError, match="no config.json"):
        load_classifier(tmp_path / "nowhere")
    (tmp_path / "model.safetensors").unlink()
    with pytest.raises(UserError, match="no model.safetensors"):
        load_classifier(tmp_path)
