"""A GGUF file (llama.cpp, Ollama, LM Studio) read into a Hugging Face folder Tempering loads.

Read with the `gguf` package (the library transformers uses for the same). What is supported:
the `llama` architecture (Llama, Mistral, SmolLM and other files llama.cpp writes as llama) and
`qwen2`; tensors in F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 and the K-quants Q2_K-Q6_K,
dequantized to float32 (a GGUF's quantization is how it carries the weights, not how Tempering
computes with them); tokenizers of llama.cpp's `gpt2` kind (byte-level BPE) with the
pre-tokenizers in `PRE_TOKENIZERS`. Anything else is a UserError naming it. llama.cpp stores a
llama model's q and k rows permuted for its rotary layout; they are put back in HF's order.
`to_folder` converts; `models.location.local_model` calls it once per file into the cache. It
writes no GGUF (the tests do, with gguf's own writer).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from tempering.errors import UserError
from tempering.jsonvalue import JSON, JSONObject

if TYPE_CHECKING:  # gguf is imported when a GGUF file is read (an optional dependency)
    from gguf import GGUFReader, GGUFValueType, ReaderField

ARCHITECTURES = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM"}
TENSOR_TYPES = ("F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K")
# llama.cpp's pre-tokenizer names -> the split regex before the byte-level step (None: GPT-2's own)
_LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
           r"|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
          r"|\s*[\r\n]+|\s+(?!\S)|\s+")
PRE_TOKENIZERS = {"default": None, "gpt2": None, "smollm": "digits", "llama-bpe": _LLAMA3, "llama3": _LLAMA3,
                  "qwen2": _QWEN2}
_LAYER = {"attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm", "attn_q": "self_attn.q_proj",
          "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj",
          "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}
_TOP = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}


def to_folder(path: str | Path, dest: str | Path) -> Path:
    """Write the GGUF file at `path` as an HF folder `dest`: config.json, model.safetensors
    (float32), tokenizer.json, tokenizer_config.json and chat_template.jinja when it has one."""
    import gguf
    from safetensors.numpy import save_file

    try:
        reader = gguf.GGUFReader(str(path))
    except (ValueError, OSError) as e:
        raise UserError(f"{path}: not a readable GGUF file ({e})") from None
    meta = _fields(reader)
    arch = meta.get("general.architecture")
    if arch not in ARCHITECTURES:
        raise UserError(f"{path}: architecture {arch!r} is not supported (supported: {', '.join(ARCHITECTURES)})")
    config = _config(meta, arch, {t.name for t in reader.tensors}, path)
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    save_file(_tensors(reader, config, arch, path), str(dest / "model.safetensors"), metadata={"format": "pt"})
    (dest / "config.json").write_text(json.dumps(config, indent=2))
    _write_tokenizer(meta, dest, path)
    return dest


def _fields(reader: GGUFReader) -> JSONObject:
    """The metadata as Python values (strings decoded, arrays as lists)."""
    import gguf

    array = gguf.GGUFValueType.ARRAY
    return {name: [_value(f, i, f.types[-1]) for i in f.data] if f.types[0] == array else _value(f, f.data[0], f.types[0])
            for name, f in reader.fields.items() if f.types}


def _value(field: ReaderField, i: int, kind: GGUFValueType) -> JSON:
    import gguf

    part = field.parts[i]
    return bytes(part).decode("utf-8", errors="replace") if kind == gguf.GGUFValueType.STRING else part.tolist()[0]


def _config(meta: JSONObject, arch: str, names: set[str], path: Path) -> JSONObject:
    def need(key: str) -> JSON:
        if f"{arch}.{key}" not in meta:
            raise UserError(f"{path}: no {arch}.{key} in the metadata")
        return meta[f"{arch}.{key}"]

    scaling = meta.get(f"{arch}.rope.scaling.type", "none")
    if scaling not in ("none", None) or "rope_freqs.weight" in names:
        raise UserError(f"{path}: rope scaling ({scaling!r}, or per-frequency factors) is not supported for GGUF files")
    heads, hidden = need("attention.head_count"), need("embedding_length")
    config = {"architectures": [ARCHITECTURES[arch]], "model_type": arch, "hidden_size": hidden,
              "intermediate_size": need("feed_forward_length"), "num_hidden_layers": need("block_count"),
              "num_attention_heads": heads, "num_key_value_heads": meta.get(f"{arch}.attention.head_count_kv", heads),
              "head_dim": meta.get(f"{arch}.attention.key_length", hidden // heads),
              "max_position_embeddings": need("context_length"),
              "rope_theta": float(meta.get(f"{arch}.rope.freq_base", 10000.0)),
              "rms_norm_eps": float(need("attention.layer_norm_rms_epsilon")),
              "vocab_size": meta.get(f"{arch}.vocab_size", len(meta.get("tokenizer.ggml.tokens", []))),
              "tie_word_embeddings": "output.weight" not in names, "hidden_act": "silu", "torch_dtype": "float32",
              "attention_bias": arch == "llama" and "blk.0.attn_q.bias" in names}
    for key in ("bos", "eos", "padding"):
        if f"tokenizer.ggml.{key}_token_id" in meta:
            config[f"{key if key != 'padding' else 'pad'}_token_id"] = meta[f"tokenizer.ggml.{key}_token_id"]
    return config


def _tensors(reader: GGUFReader, config: JSONObject, arch: str, path: Path) -> dict[str, np.ndarray]:
    from gguf.quants import dequantize

    out: dict[str, np.ndarray] = {}
    for t in reader.tensors:
        if t.tensor_type.name not in TENSOR_TYPES:
            raise UserError(f"{path}: tensor {t.name} is {t.tensor_type.name}, not a supported type "
                            f"({', '.join(TENSOR_TYPES)})")
        name = _hf_name(t.name, path)
        data = np.ascontiguousarray(dequantize(t.data, t.tensor_type), dtype=np.float32)
        if arch == "llama" and name.endswith(("q_proj.weight", "q_proj.bias", "k_proj.weight", "k_proj.bias")):
            heads = config["num_attention_heads" if ".q_proj." in name else "num_key_value_heads"]
            data = unpermute(data, heads)
        out[name] = data
    return out


def _hf_name(name: str, path: Path) -> str:
    parts = name.split(".")
    if parts[0] == "blk" and len(parts) == 4 and parts[2] in _LAYER:
        return f"model.layers.{parts[1]}.{_LAYER[parts[2]]}.{parts[3]}"
    if len(parts) == 2 and parts[0] in _TOP:
        return f"{_TOP[parts[0]]}.{parts[1]}"
    raise UserError(f"{path}: tensor {name!r} has no counterpart in the supported architectures")


def unpermute(w: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's rotary layout back to HF's: within each head, rows (or bias entries) that
    llama.cpp interleaves in pairs go back to two halves."""
    rest = w.shape[1:]
    return w.reshape(heads, w.shape[0] // heads // 2, 2, *rest).swapaxes(1, 2).reshape(w.shape)


def _write_tokenizer(meta: JSONObject, dest: Path, path: Path) -> None:
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

    kind, pre = meta.get("tokenizer.ggml.model"), meta.get("tokenizer.ggml.pre", "default")
    if kind != "gpt2":
        raise UserError(f"{path}: tokenizer model {kind!r} is not supported (supported: 'gpt2', byte-level BPE)")
    if pre not in PRE_TOKENIZERS:
        raise UserError(f"{path}: pre-tokenizer {pre!r} is not supported (supported: {', '.join(PRE_TOKENIZERS)})")
    tokens, types = meta["tokenizer.ggml.tokens"], meta.get("tokenizer.ggml.token_type", [])
    merges = [tuple(m.split(" ", 1)) for m in meta.get("tokenizer.ggml.merges", [])]
    inner = Tokenizer(models.BPE({t: i for i, t in enumerate(tokens)}, merges))
    split = PRE_TOKENIZERS[pre]
    if split is None:
        inner.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    elif split == "digits":
        inner.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                       pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    else:
        inner.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(split), behavior="isolated"),
                                                       pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    if pre == "qwen2":
        inner.normalizer = normalizers.NFC()  # Qwen2's tokenizer composes characters first
    inner.decoder = decoders.ByteLevel()
    # control (3) and user-defined (4) tokens are matched whole; control ones are special
    inner.add_tokens([AddedToken(tokens[i], special=types[i] == 3, normalized=False)
                      for i in range(len(types)) if types[i] in (3, 4)])
    name = {key: tokens[meta[f"tokenizer.ggml.{key}_token_id"]] for key in ("bos", "eos", "padding", "unknown")
            if f"tokenizer.ggml.{key}_token_id" in meta}
    steps = [processors.ByteLevel(trim_offsets=False)]
    bos = meta.get("tokenizer.ggml.add_bos_token", False) and "bos" in name
    if bos:
        steps.append(processors.TemplateProcessing(single=f"{name['bos']} $A:0", pair=f"{name['bos']} $A:0 $B:1",
                                                   special_tokens=[(name["bos"], meta["tokenizer.ggml.bos_token_id"])]))
    inner.post_processor = processors.Sequence(steps)
    inner.save(str(dest / "tokenizer.json"))
    cfg = {"tokenizer_class": "PreTrainedTokenizerFast", "add_bos_token": bool(bos), "add_eos_token": False,
           **{f"{k if k != 'padding' else 'pad'}_token": v for k, v in name.items() if k != "unknown"}}
    if "unknown" in name:
        cfg["unk_token"] = name["unknown"]
    template = meta.get("tokenizer.chat_template")
    if template:
        cfg["chat_template"] = template
        (dest / "chat_template.jinja").write_text(template, encoding="utf-8")
    (dest / "tokenizer_config.json").write_text(json.dumps(cfg, indent=2))
