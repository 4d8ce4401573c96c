"""The decoder against transformers: same logits after loading, loadable after saving."""

import pytest
import torch

from tempering.models import load_hf, save_hf

transformers = pytest.importorskip("transformers")


def _pairs():
    llama = transformers.LlamaConfig(vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                     num_attention_heads=4, num_key_value_heads=2)
    qwen = transformers.Qwen2Config(vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                    num_attention_heads=4, num_key_value_heads=1, tie_word_embeddings=True)
    llama31 = transformers.LlamaConfig(
        vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=4, max_position_embeddings=1024, rope_theta=500000.0,
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                      "original_max_position_embeddings": 128})
    return [(transformers.LlamaForCausalLM, llama), (transformers.Qwen2ForCausalLM, qwen),
            (transformers.LlamaForCausalLM, llama31)]


@pytest.mark.parametrize("cls, cfg", _pairs(), ids=["llama", "qwen2-tied-bias", "llama3.1-rope"])
def test_load_and_save_match_transformers(tmp_path, cls, cfg):
    torch.manual_seed(0)
    ref = cls(cfg).eval()
    ref.save_pretrained(tmp_path / "hf")
    ours = load_hf(tmp_path / "hf").eval()
    ids = torch.randint(0, 97, (2, 200))
    with torch.no_grad():
        expected = ref(ids).logits
        got = ours(ids)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)

    save_hf(ours, tmp_path / "ours")
    back = cls.from_pretrained(tmp_path / "ours").eval()
    with torch.no_grad():
        torch.testing.assert_close(back(ids).logits, expected, atol=1e-5, rtol=1e-5)


def test_load_rejects_mismatched_checkpoint(tmp_path):
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=50, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                   num_attention_heads=2, num_key_value_heads=2)
    transformers.LlamaForCausalLM(cfg).save_pretrained(tmp_path)
    from safetensors.torch import load_file, save_file

    state = load_file(tmp_path / "model.safetensors")
    state.pop("model.norm.weight")
    save_file(state, tmp_path / "model.safetensors")
    with pytest.raises(ValueError, match="missing.*model.norm.weight"):
        load_hf(tmp_path)


def test_unsupported_architecture_is_named(tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "gpt2"}')
    with pytest.raises(ValueError, match="gpt2"):
        load_hf(tmp_path)


def test_corrupt_weights_are_named(tmp_path):
    cfg = transformers.LlamaConfig(vocab_size=50, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                   num_attention_heads=2, num_key_value_heads=2)
    transformers.LlamaForCausalLM(cfg).save_pretrained(tmp_path)
    (tmp_path / "model.safetensors").write_bytes(b"garbage" * 10)
    with pytest.raises(ValueError, match="model.safetensors: not a readable safetensors file"):
        load_hf(tmp_path)
