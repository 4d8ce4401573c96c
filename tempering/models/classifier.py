"""`SequenceClassifier`: the decoder's body with a sequence-scoring head, HF's
`LlamaForSequenceClassification` / `Qwen2ForSequenceClassification` layout (a reward model).

Parameters are `model.*` (the same body as `Decoder`) and `score.weight` (hidden -> num_labels,
no bias). A row is scored at its last token that is not `pad_token_id` (the rightmost one, as
transformers does for left or right padding; a row of nothing but pad scores at position 0);
without a pad id, at the row's last token. `config.json` carries `architectures`
(`*ForSequenceClassification`), `id2label` and `label2id` (transformers derives `num_labels`
from `id2label`, 2 when it is absent), so `AutoModelForSequenceClassification.from_pretrained`
loads a saved folder and gives the same scores, and a folder saved by transformers loads here.
A causal-LM folder loads as the body of a new classifier with `new_head=True` (its `lm_head`
dropped, `score` freshly initialised), as transformers does.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import save_file
from torch import nn

from tempering.errors import UserError
from tempering.jsonvalue import JSONObject
from tempering.models.arch import Arch
from tempering.models.checkpoint import _read_tensors, read_arch
from tempering.models.decoder import Attention, Block, Body, causal_attention, init_parameters
from tempering.models.rope import apply_rotary, cos_sin, inverse_frequencies

ARCHITECTURES = {"llama": "LlamaForSequenceClassification", "qwen2": "Qwen2ForSequenceClassification"}


def last_token_index(input_ids: torch.Tensor, pad_token_id: int | None) -> torch.Tensor:
    """[B, T] -> [B]: the position each row is scored at, as transformers picks it: the rightmost
    token that is not `pad_token_id` (0 for a row of pads), or the last position without one."""
    b, t = input_ids.shape
    if pad_token_id is None:
        return torch.full((b,), t - 1, dtype=torch.long, device=input_ids.device)
    keep = (input_ids != pad_token_id).long()
    return (torch.arange(t, device=input_ids.device) * keep).argmax(-1)


class SequenceClassifier(nn.Module):
    def __init__(self, arch: Arch, num_labels: int = 1):
        super().__init__()
        if num_labels < 1:
            raise UserError(f"num_labels must be >= 1, got {num_labels}")
        # No lm_head, so nothing is tied; saved configs say so (transformers would look for a tie).
        self.arch = dataclasses.replace(arch, tie_word_embeddings=False)
        self.num_labels = num_labels
        self.model = Body(self.arch)
        self.score = nn.Linear(arch.hidden_size, num_labels, bias=False)
        self.register_buffer("inv_freq", inverse_frequencies(self.arch), persistent=False)

    def hidden_states(self, input_ids: torch.Tensor, positions: torch.Tensor | None = None,
                      attention: Attention = causal_attention) -> torch.Tensor:
        return self.model(input_ids, self.inv_freq, positions, attention)

    def forward(self, input_ids: torch.Tensor, last: torch.Tensor | None = None, positions: torch.Tensor | None = None,
                attention: Attention = causal_attention) -> torch.Tensor:
        """input_ids [B, T] -> scores [B, num_labels] in fp32, taken at `last` [B] (default: the
        position transformers picks, `last_token_index`). Right padding needs no mask: attention
        is causal, so a row's real tokens never see the pads after them. With causal attention
        the last layer runs its queries and MLP at the scored positions only (the other
        positions' outputs of that layer feed nothing): the same scores, less work."""
        if last is None:
            last = last_token_index(input_ids, self.arch.pad_token_id)
        rows = torch.arange(input_ids.shape[0], device=input_ids.device)
        if attention is not causal_attention:
            return self.score(self.hidden_states(input_ids, positions, attention)[rows, last]).float()
        if positions is None:
            positions = torch.arange(input_ids.shape[1], device=input_ids.device).expand_as(input_ids)
        x = self.model.embed_tokens(input_ids)
        cos, sin = cos_sin(self.inv_freq, positions, x.dtype)
        *early, final = self.model.layers
        for block in early:
            x = block(x, cos, sin, attention)
        return self.score(self.model.norm(_at_positions(final, x, cos, sin, rows, last))).float()

    def init_weights(self, generator: torch.Generator | None = None, std: float = 0.02) -> None:
        init_parameters(self, generator, std)

    def hf_config(self) -> JSONObject:
        cfg = self.arch.to_hf()
        cfg["architectures"] = [ARCHITECTURES[self.arch.model_type]]
        cfg["id2label"] = {str(i): f"LABEL_{i}" for i in range(self.num_labels)}
        cfg["label2id"] = {f"LABEL_{i}": i for i in range(self.num_labels)}
        return cfg


def _at_positions(block: Block, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, rows: torch.Tensor,
                  last: torch.Tensor) -> torch.Tensor:
    """`block`'s output at one position per row ([B, hidden]): keys and values from every
    position up to it, the query, attention output and MLP at that position only."""
    attn = block.self_attn
    b, t, _ = x.shape
    h = block.input_layernorm(x)
    k = attn.k_proj(h).view(b, t, attn.kv_heads, attn.head_dim).transpose(1, 2)
    v = attn.v_proj(h).view(b, t, attn.kv_heads, attn.head_dim).transpose(1, 2)
    k = apply_rotary(k, cos, sin)
    q = attn.q_proj(h[rows, last]).view(b, attn.heads, 1, attn.head_dim)
    q = apply_rotary(q, cos[rows, :, last][:, :, None], sin[rows, :, last][:, :, None])
    visible = (torch.arange(t, device=x.device)[None, :] <= last[:, None])[:, None, None, :]  # causal at `last`
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=visible, enable_gqa=attn.heads != attn.kv_heads)
    y = x[rows, last] + attn.o_proj(out.reshape(b, attn.heads * attn.head_dim))
    return y + block.mlp(block.post_attention_layernorm(y))


def build_classifier(arch: Arch, num_labels: int = 1, seed: int = 0) -> SequenceClassifier:
    model = SequenceClassifier(arch, num_labels)
    model.init_weights(torch.Generator().manual_seed(seed))
    return model


def read_num_labels(folder: str | Path) -> int | None:
    """num_labels as transformers reads config.json (len(id2label), else `num_labels`); None
    when the config says neither (transformers would take 2)."""
    cfg = json.loads((Path(folder) / "config.json").read_text())
    if isinstance(cfg.get("id2label"), dict) and cfg["id2label"]:
        return len(cfg["id2label"])
    n = cfg.get("num_labels")
    return n if isinstance(n, int) else None


def load_classifier(folder: str | Path, dtype: torch.dtype = torch.float32, num_labels: int | None = None,
                    new_head: bool = False, seed: int = 0) -> SequenceClassifier:
    """An HF folder of the *ForSequenceClassification layout. `num_labels` (default: the
    config's, else 2 as in transformers) must agree with a stored head. `new_head`: a folder
    without `score.weight` (a causal LM, say) gives its body and a random head of `num_labels`
    (default 1); its `lm_head` is dropped. Missing or unexpected tensors are errors naming them."""
    folder = Path(folder)
    arch = read_arch(folder)
    stored = read_num_labels(folder)
    state = _read_tensors(folder)
    has_head = "score.weight" in state
    if has_head:
        rows = state["score.weight"].shape[0]
        if num_labels is not None and num_labels != rows:
            raise UserError(f"{folder}: its score head has {rows} labels, not {num_labels}")
        num_labels = rows
    elif new_head:
        num_labels = num_labels or 1
        state.pop("lm_head.weight", None)
    else:
        num_labels = num_labels or stored or 2
    with torch.device("meta"):
        model = SequenceClassifier(arch, num_labels)
    expected = set(model.state_dict()) - ({"score.weight"} if not has_head and new_head else set())
    missing, unexpected = sorted(expected - set(state)), sorted(set(state) - expected)
    unexpected = [k for k in unexpected if not k.endswith("rotary_emb.inv_freq")]
    if missing or unexpected:
        hint = " (a causal LM folder? it loads as a new reward model's base with new_head)" \
            if missing == ["score.weight"] else ""
        raise UserError(f"{folder}: checkpoint does not match a {arch.model_type} sequence classifier: "
                        f"missing {missing[:5]}, unexpected {unexpected[:5]}{hint}")
    model.load_state_dict({k: v.to(dtype) for k, v in state.items() if k in expected}, strict=False, assign=True)
    if not has_head:
        head = torch.empty(num_labels, arch.hidden_size, dtype=dtype)
        nn.init.normal_(head, 0.0, 0.02, generator=torch.Generator().manual_seed(seed))
        model.score.weight = nn.Parameter(head)
    model.inv_freq = inverse_frequencies(model.arch)
    return model


def save_classifier(model: SequenceClassifier, folder: str | Path) -> None:
    """Write config.json and model.safetensors in the layout transformers loads."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
    save_file(state, folder / "model.safetensors", metadata={"format": "pt"})
    (folder / "config.json").write_text(json.dumps(model.hf_config(), indent=2))
