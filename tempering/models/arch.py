"""`Arch`: the architecture of a Llama/Qwen2-style decoder, with HF config.json round-tripping.

Field names are HF's so a config.json reads straight across. Only what the decoder implements is
accepted: an unsupported model type or rope scaling is a clear error, never a silent mismatch.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from tempering.errors import UserError
from tempering.jsonvalue import JSONObject

SUPPORTED_TYPES = ("llama", "qwen2")
SUPPORTED_ROPE = ("default", "linear", "llama3")


@dataclass(frozen=True)
class Arch:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int = 0  # 0 = hidden_size // num_attention_heads
    max_position_embeddings: int = 2048
    rope_theta: float = 10000.0
    rope_scaling: JSONObject = field(default_factory=dict)  # {} = plain RoPE
    rms_norm_eps: float = 1e-6
    tie_word_embeddings: bool = False
    attention_bias: bool = False
    model_type: str = "llama"
    bos_token_id: int | None = None
    eos_token_id: int | list[int] | None = None
    pad_token_id: int | None = None

    def __post_init__(self) -> None:
        if self.model_type not in SUPPORTED_TYPES:
            raise UserError(f"model_type {self.model_type!r} is not supported (supported: {SUPPORTED_TYPES})")
        if self.head_dim == 0:
            object.__setattr__(self, "head_dim", self.hidden_size // self.num_attention_heads)
        rope_type = self.rope_scaling.get("rope_type", self.rope_scaling.get("type", "default"))
        if rope_type not in SUPPORTED_ROPE:
            raise UserError(f"rope scaling {rope_type!r} is not supported (supported: {SUPPORTED_ROPE})")
        if self.num_attention_heads % self.num_key_value_heads:
            raise UserError("num_attention_heads must be a multiple of num_key_value_heads")

    @property
    def qkv_bias(self) -> bool:
        return self.attention_bias or self.model_type == "qwen2"

    @property
    def o_bias(self) -> bool:
        return self.attention_bias and self.model_type == "llama"

    @classmethod
    def from_hf(cls, cfg: JSONObject) -> "Arch":
        """Read an HF config.json dict (transformers 4.x `rope_theta/rope_scaling` or 5.x
        `rope_parameters`)."""
        model_type = cfg.get("model_type", "llama")
        if model_type not in SUPPORTED_TYPES:
            raise UserError(f"config.json: model_type {model_type!r} is not supported (supported: {SUPPORTED_TYPES})")
        if cfg.get("use_sliding_window"):
            raise UserError("config.json: use_sliding_window = true is not supported yet")
        rope = dict(cfg.get("rope_parameters") or {})
        theta = float(rope.pop("rope_theta", cfg.get("rope_theta", 10000.0)))
        scaling = dict(cfg.get("rope_scaling") or rope)
        if scaling.get("rope_type", scaling.get("type")) in (None, "default"):
            scaling = {}
        names = {k for k in cls.__dataclass_fields__} - {"rope_theta", "rope_scaling"}
        kwargs = {k: cfg[k] for k in names if k in cfg and cfg[k] is not None}
        kwargs.setdefault("head_dim", 0)
        return cls(rope_theta=theta, rope_scaling=scaling, **kwargs)

    def to_hf(self) -> JSONObject:
        d = asdict(self)
        d["architectures"] = ["LlamaForCausalLM" if self.model_type == "llama" else "Qwen2ForCausalLM"]
        d["hidden_act"] = "silu"
        d["torch_dtype"] = "float32"
        if not self.rope_scaling:
            d["rope_scaling"] = None
        if self.model_type == "qwen2":
            d.pop("attention_bias")
            d.update(use_sliding_window=False, sliding_window=None, max_window_layers=self.num_hidden_layers)
        return {k: v for k, v in d.items() if v is not None or k == "rope_scaling"}
