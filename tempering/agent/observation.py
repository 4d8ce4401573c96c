"""Tool results as tokens: what follows an assistant turn that called tools.

The results are rendered once and appended to the trajectory's token ids, never by re-rendering
the whole conversation as text (a re-encoded conversation can tokenize the model's own turns
differently, and its logprobs would no longer be the trainer's). With a chat template, the
tokens are the template's own rendering of the tool messages: the difference between a
conversation that ends with an assistant turn and the same conversation followed by the tool
messages and the generation prompt, starting right after the end-of-turn token the model
sampled. The compact format (the demo's character model) renders `>output` lines.
"""

from __future__ import annotations

from tempering.errors import UserError
from tempering.records import Message, ToolCall
from tempering.tokenizer import Tokenizer

_PROBE = [Message("user", "u"), Message("assistant", "a")]


class ObservationRenderer:
    def __init__(self, tokenizer: Tokenizer, chat: bool):
        self.tokenizer, self.chat = tokenizer, chat
        if chat:
            if not tokenizer.chat_template:
                raise UserError("the hermes tool format needs a tokenizer with a chat template")
            self._after_turn = self._text_after_turn_end()

    def tokens(self, calls: list[ToolCall]) -> list[int]:
        return self.tokenizer.encode(self.text(calls))

    def text(self, calls: list[ToolCall]) -> str:
        contents = [c.output if not c.error else f"error: {c.error}" for c in calls]
        if not self.chat:
            return "".join(f">{c}\n" for c in contents)
        base = self.tokenizer.render_chat(_PROBE, add_generation_prompt=False)
        full = self.tokenizer.render_chat(_PROBE + [Message("tool", c) for c in contents],
                                          add_generation_prompt=True)
        if not full.startswith(base):
            raise UserError("the chat template renders tool messages by changing what came before them; "
                             "their tokens cannot be appended to the conversation")
        return self._after_turn + full[len(base):]

    def _text_after_turn_end(self) -> str:
        """What the template puts after the assistant's end-of-turn token (Qwen: a newline),
        which the model did not sample but the next turn's context contains."""
        base = self.tokenizer.render_chat(_PROBE, add_generation_prompt=False)
        eos = self.tokenizer.eos_token
        end = base.rfind(eos)
        if end < 0:
            raise UserError(f"the chat template does not end an assistant turn with {eos!r}, the token "
                             "that ends a model turn in generation")
        return base[end + len(eos):]
