"""Tokenizers: HF `tokenizer.json` folders, and a character tokenizer built locally for the demo.

Wraps `tokenizers.Tokenizer` with what the rest of the system needs: the stop (eos) ids, a pad
id, prompt rendering (the folder's Jinja chat template when there is one, read where
transformers reads it: `chat_template`), prompt encoding and decoding. It does not download
anything.

Prompts are encoded as `transformers` (and so vLLM) encodes them: a plain prompt through the
tokenizer.json post-processor, which adds the BOS of Llama-family tokenizers (`add_bos_token`);
chat messages rendered with the template, which writes its own `bos_token`, and encoded without
specials. transformers 5 ignores tokenizer_config.json's `add_bos_token`/`add_eos_token` when a
tokenizer.json is there (its post-processor decides), and so does this. A prompt never starts
with two BOS: a text that already begins with it gets none added. `encode` is the raw encoding
(no specials), for references and targets.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Sequence

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import Regex, Tokenizer as HFTokenizer, decoders, models, pre_tokenizers

from tempering.errors import UserError
from tempering.records import Message, ToolCall

SPECIALS = ("<pad>", "<bos>", "<eos>", "<unk>")


class Tokenizer:
    def __init__(self, inner: HFTokenizer, eos_token: str, pad_token: str | None = None,
                 chat_template: str | None = None, bos_token: str | None = None):
        self.inner = inner
        self.eos_id = _token_id(inner, eos_token)
        self.pad_id = _token_id(inner, pad_token) if pad_token else self.eos_id
        self.bos_token, self.eos_token = bos_token, eos_token
        # What the post-processor puts before a prompt's own ids: [bos_id] for Llama-style folders,
        # nothing for Qwen2-style ones and the demo's character tokenizer.
        self.prefix_ids, suffix = _post_processor_ids(inner)
        named_bos = inner.token_to_id(bos_token) if bos_token else None
        self.bos_id: int | None = named_bos if named_bos is not None else (self.prefix_ids or [None])[-1]
        self.add_bos_token = self.bos_id is not None and self.prefix_ids[-1:] == [self.bos_id]
        self.add_eos_token = suffix[:1] == [self.eos_id]
        self.chat_template = chat_template
        self._compiled: tuple[str, jinja2.Template] | None = None  # (source, template)
        self._tools_rendered: tuple[str, bool] | None = None  # (source, whether it prints `tools`)
        self._special: frozenset[int] | None = None

    def __getstate__(self) -> dict:
        # The compiled chat template does not pickle; it is rebuilt on first use.
        return {**self.__dict__, "_compiled": None}

    @property
    def vocab_size(self) -> int:
        return self.inner.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str) -> list[int]:
        """The raw encoding, no special tokens added (references, targets, stop strings)."""
        return self.inner.encode(text, add_special_tokens=False).ids

    def encode_prompt(self, prompt: str, messages: Sequence[Message] = (), tools: list[dict] | None = None) -> list[int]:
        """The prompt's ids as `transformers` gives them: `AutoTokenizer(prompt).input_ids` for a
        plain prompt (or messages without a chat template), `apply_chat_template(messages,
        add_generation_prompt=True, tokenize=True)` for messages; never two BOS at the start."""
        if messages and self.chat_template:
            return self.encode(self.render(prompt, messages, tools))  # the template writes any BOS itself
        ids = self.inner.encode(prompt, add_special_tokens=True).ids
        n = len(self.prefix_ids)
        if self.add_bos_token and ids[n: n + 1] == [self.bos_id]:
            del ids[n - 1]  # the text begins with BOS already: the post-processor's one would be a second
        return ids

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return self.inner.decode(list(ids), skip_special_tokens=skip_special_tokens)

    @property
    def special_ids(self) -> frozenset[int]:
        """Ids of the special tokens (eos, pad, chat markers...): decoding drops them, so a
        verifier must look for them in the ids."""
        if self._special is None:
            self._special = frozenset(i for i, tok in self.inner.get_added_tokens_decoder().items() if tok.special)
        return self._special

    def token(self, token_id: int) -> str:
        return self.inner.id_to_token(token_id)

    def render(self, prompt: str, messages: Sequence[Message] = (), tools: list[dict] | None = None) -> str:
        """The text the model sees: the chat template over `messages` when both exist, else the
        plain prompt (the demo's tiny models are trained on plain text). `tools`: function
        definitions the template prints (Qwen2.5 / Hermes templates list them in the system turn)."""
        if not messages or not self.chat_template:
            return prompt
        return self.render_chat(messages, add_generation_prompt=True, tools=tools)

    def render_chat(self, messages: Sequence[Message], add_generation_prompt: bool,
                    tools: list[dict] | None = None) -> str:
        """The chat template over `messages` (it must have one). A template that does not print
        `tools` (SmolLM2's, plain ChatML) gets them in the system turn, in the hermes form the
        tool parser reads, so a model can call them whatever its template knows."""
        if tools and not self._renders_tools():
            messages, tools = with_tool_schemas(messages, tools), None
        return self._template().render(
            messages=[_message_dict(m) for m in messages], tools=tools,
            add_generation_prompt=add_generation_prompt, bos_token=self.bos_token or "", eos_token=self.eos_token,
        )

    def _template(self) -> jinja2.Template:
        # Compiled once per template: rendering happens for every prompt of every rollout.
        if self._compiled is None or self._compiled[0] != self.chat_template:
            # As transformers renders them: a sandbox (templates come with model folders), loop
            # controls, undefined attributes falsy (`message.tool_calls`), and its tojson, which
            # does not escape HTML characters as Jinja's own does.
            env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
            env.filters["tojson"] = _tojson
            env.globals["raise_exception"] = _raise
            env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
            self._compiled = (self.chat_template, env.from_string(self.chat_template))
        return self._compiled[1]

    def _renders_tools(self) -> bool:
        if self._tools_rendered is None or self._tools_rendered[0] != self.chat_template:
            probe, tool = [_message_dict(Message("user", "u"))], [{"type": "function", "function": {"name": "probe_fn"}}]
            args = {"add_generation_prompt": True, "bos_token": self.bos_token or "", "eos_token": self.eos_token}
            rendered = self._template().render(messages=probe, tools=tool, **args)
            self._tools_rendered = (self.chat_template, rendered != self._template().render(messages=probe, tools=None, **args))
        return self._tools_rendered[1]

    def save(self, folder: str | Path) -> None:
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        self.inner.save(str(folder / "tokenizer.json"))
        pad = self.inner.id_to_token(self.pad_id)
        # add_bos_token/add_eos_token say what tokenizer.json's post-processor does (transformers 5
        # reads that, not these keys; older readers and converters read the keys).
        cfg = {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": self.eos_token, "pad_token": pad,
               "add_bos_token": self.add_bos_token, "add_eos_token": self.add_eos_token}
        if self.bos_token:
            cfg["bos_token"] = self.bos_token
        if self.chat_template:
            cfg["chat_template"] = self.chat_template  # where transformers 4 reads it
        (folder / "tokenizer_config.json").write_text(json.dumps(cfg, indent=2))
        if self.chat_template:  # where transformers 5 writes and reads it, first
            (folder / "chat_template.jinja").write_text(self.chat_template, encoding="utf-8")


def with_tool_schemas(messages: Sequence[Message], tools: list[dict]) -> list[Message]:
    """`messages` with the tools' JSON schemas and how to call them in the system turn (added
    first, or appended to the one there is): the hermes form, a JSON object in <tool_call> tags."""
    schemas = "\n".join(json.dumps(t, ensure_ascii=False) for t in tools)
    block = ("You can call functions to help with the task. Their JSON schemas:\n<tools>\n"
             f"{schemas}\n</tools>\nTo call one, write its name and arguments as a JSON object between "
             'tags, one call per pair of tags:\n<tool_call>\n{"name": "the function", "arguments": '
             "{...}}\n</tool_call>")
    # Such a template does not print an assistant turn's tool calls either: they go in its text.
    out = [Message(m.role, m.content + "".join(_call_text(c) for c in m.tool_calls), (), m.tool_call_id)
           for m in messages]
    if out and out[0].role == "system":
        return [Message("system", f"{out[0].content}\n\n{block}"), *out[1:]]
    return [Message("system", block), *out]


def _call_text(call: ToolCall) -> str:
    return "\n" + hermes_call(call)


def hermes_call(call: ToolCall) -> str:
    """One call as the hermes form writes it (the tool parser `hermes` reads it back)."""
    return "<tool_call>\n" + json.dumps({"name": call.name, "arguments": dict(call.arguments)}, ensure_ascii=False) + "\n</tool_call>"


def _message_dict(m: Message) -> dict:
    """A message as chat templates read it: tool calls as OpenAI writes them, but with the
    arguments as an object (Qwen2.5's and Hermes' templates print them with `tojson`)."""
    out: dict = {"role": m.role, "content": m.content}
    if m.tool_calls:
        out["tool_calls"] = [{"id": c.id, "type": "function", "function": {"name": c.name, "arguments": dict(c.arguments)}}
                             for c in m.tool_calls]
    if m.tool_call_id:
        out["tool_call_id"] = m.tool_call_id
    return out


def _tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False) -> str:
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _raise(message: str):
    raise UserError(f"chat template: {message}")


def _token_id(inner: HFTokenizer, token: str) -> int:
    tid = inner.token_to_id(token)
    if tid is None:
        raise UserError(f"tokenizer has no token {token!r}")
    return tid


def _post_processor_ids(inner: HFTokenizer) -> tuple[list[int], list[int]]:
    """(ids the post-processor puts before a text's own, ids it puts after), e.g. ([bos], [])."""
    around = inner.encode("", add_special_tokens=True).ids
    if not around:
        return [], []
    for tid, tok in inner.get_added_tokens_decoder().items():
        if tid not in around:  # a probe text whose ids the post-processor's own cannot be mistaken for
            ids = inner.encode(tok.content, add_special_tokens=True).ids
            if ids.count(tid) == 1:
                k = ids.index(tid)
                return ids[:k], ids[k + 1:]
    return around, []  # no probe token: take all of it as leading


def char_tokenizer(alphabet: str) -> Tokenizer:
    """One token per character of `alphabet` plus <pad> <bos> <eos> <unk>; for tiny demo models.
    No post-processor: prompts get no BOS (the demo's models are trained without one)."""
    chars = sorted(set(alphabet))
    vocab = {tok: i for i, tok in enumerate(SPECIALS)}
    for c in chars:
        vocab.setdefault(c, len(vocab))
    inner = HFTokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    # every char a token, newlines too ("." alone leaves runs of them as one unknown piece)
    inner.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    inner.decoder = decoders.Fuse()
    inner.add_special_tokens(list(SPECIALS))
    return Tokenizer(inner, eos_token="<eos>", pad_token="<pad>", bos_token="<bos>")


def load_tokenizer(path: str | Path) -> Tokenizer:
    """A tokenizer.json file, or a folder with tokenizer.json (+ tokenizer_config.json)."""
    path = Path(path)
    file = path / "tokenizer.json" if path.is_dir() else path
    if not file.is_file():
        raise UserError(f"{path}: no tokenizer.json found")
    try:
        inner = HFTokenizer.from_file(str(file))
    except Exception as e:  # noqa: BLE001 - the tokenizers library raises bare Exception on bad files
        raise UserError(f"{file}: not a readable tokenizer.json ({e})") from None
    cfg_file = file.parent / "tokenizer_config.json"
    try:
        cfg = json.loads(cfg_file.read_text()) if cfg_file.is_file() else {}
    except json.JSONDecodeError as e:
        raise UserError(f"{cfg_file}: not valid JSON ({e})") from None
    eos = _token_text(cfg.get("eos_token")) or _guess_eos(inner, file)
    return Tokenizer(inner, eos_token=eos, pad_token=_token_text(cfg.get("pad_token")),
                     chat_template=chat_template(file.parent, cfg), bos_token=_token_text(cfg.get("bos_token")))


def chat_template(folder: Path, cfg: dict) -> str | None:
    """The folder's default chat template where transformers looks for it: the template files
    first (`chat_template.jinja`, what transformers 5 saves; `chat_templates/default.jinja`, the
    default among named ones), then tokenizer_config.json's `chat_template` (a string, or a list
    of named ones: "default"), then the older `chat_template.json`. None when it has none."""
    for jinja in (folder / "chat_template.jinja", folder / "chat_templates" / "default.jinja"):
        if jinja.is_file():
            return jinja.read_text(encoding="utf-8")
    named = cfg.get("chat_template")
    if isinstance(named, list):
        named = {t.get("name"): t.get("template") for t in named if isinstance(t, dict)}.get("default")
    if isinstance(named, str):
        return named
    old = folder / "chat_template.json"
    if old.is_file():
        try:
            return json.loads(old.read_text(encoding="utf-8")).get("chat_template")
        except (json.JSONDecodeError, AttributeError) as e:
            raise UserError(f"{old}: not a JSON object with a chat_template ({e})") from None
    return None


def _token_text(tok) -> str | None:
    # tokenizer_config.json stores special tokens as strings or as {"content": ...} objects.
    return tok.get("content") if isinstance(tok, dict) else tok


def _guess_eos(inner: HFTokenizer, file: Path) -> str:
    for candidate in ("<|endoftext|>", "</s>", "<|end_of_text|>", "<eos>"):
        if inner.token_to_id(candidate) is not None:
            return candidate
    raise UserError(f"{file}: cannot tell the end-of-sequence token; add eos_token to tokenizer_config.json")
