"""Tokenizers: the demo's character tokenizer round-trips; HF folders load; bad files are named."""

import pytest

from tempering.records import Message
from tempering.tokenizer import char_tokenizer, load_tokenizer


def test_char_tokenizer_round_trip_and_save(tmp_path):
    tok = char_tokenizer("abc =")
    ids = tok.encode("ab c=")
    assert len(ids) == 5 and tok.decode(ids + [tok.eos_id]) == "ab c="
    tok.save(tmp_path)
    again = load_tokenizer(tmp_path)
    assert again.encode("ab c=") == ids and again.eos_id == tok.eos_id and again.pad_id == tok.pad_id
    transformers = pytest.importorskip("transformers")
    hf = transformers.PreTrainedTokenizerFast(tokenizer_file=str(tmp_path / "tokenizer.json"))
    assert hf("ab c=").input_ids == ids


def test_chat_template_renders_messages(tmp_path):
    tok = char_tokenizer("abc:")
    tok.chat_template = "{% for m in messages %}{{ m.role[0] }}:{{ m.content }}{% endfor %}{% if add_generation_prompt %}a:{% endif %}"
    assert tok.render("ignored", [Message("user", "abc")]) == "u:abca:"
    assert tok.render("plain") == "plain"


@pytest.mark.parametrize("name, text, words", [
    ("tokenizer.json", "{bad", ["tokenizer.json", "not a readable"]),
    ("tokenizer_config.json", "{bad", ["tokenizer_config.json", "not valid JSON"]),
])
def test_bad_files_are_named(tmp_path, name, text, words):
    char_tokenizer("ab").save(tmp_path)
    (tmp_path / name).write_text(text)
    with pytest.raises(ValueError) as e:
        load_tokenizer(tmp_path)
    for w in words:
        assert w in str(e.value)


def test_missing_tokenizer_is_named(tmp_path):
    with pytest.raises(ValueError, match="no tokenizer.json"):
        load_tokenizer(tmp_path)


def test_char_tokenizer_spells_every_character_newlines_included():
    from tempering.tokenizer import char_tokenizer

    tok = char_tokenizer("ab \n")
    text = "a\n\nb \n\n\n"
    assert len(tok.encode(text)) == len(text) and tok.decode(tok.encode(text)) == text
