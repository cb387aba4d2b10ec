"""A served model's prompts -> token ids: a chat rendered with its template (with the
family's tool context and the documents) and encoded, or a plain prompt encoded.

`VLLMEngine.bind_family` builds the `Prompts` of the model it serves; prompt token ids a
request brings are checked and taken as they are by the engine.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engine.families import Family
from engine.protocol import GenerateRequest
from engine.templates import render_chat
from engine.tool_use import calls_tools
from engine.vllm_backend.encoding import Encode, encoder


@dataclass(frozen=True, slots=True)
class Prompts:
    """One chat template and tokenizer, bound together."""

    template: str
    special_tokens: dict[str, str]
    encode: Encode
    family: Family | None = None

    @classmethod
    def of(cls, tokenizer: Any, template: str, family: Family | None) -> Prompts:
        special_tokens = {
            "bos_token": tokenizer.bos_token or "",
            "eos_token": tokenizer.eos_token or "",
        }
        return cls(template, special_tokens, encoder(tokenizer), family)

    def token_ids(self, request: GenerateRequest) -> list[int]:
        """A request's messages rendered and encoded, else its prompt encoded."""
        if request.messages is not None:
            kwargs = dict(request.template_kwargs)
            if calls_tools(request.tools, request.tool_choice):
                kwargs["tools"] = request.tools
                family = self.family
                if family is not None and family.template_context is not None:
                    kwargs.update(family.template_context(request.tools))
            if request.documents is not None:
                kwargs["documents"] = request.documents
            text = render_chat(
                self.template,
                request.messages,
                add_generation_prompt=request.add_generation_prompt,
                continue_final_message=request.continue_final_message,
                special_tokens=self.special_tokens,
                template_kwargs=kwargs,
            )
            # The template already wrote the special tokens (unless asked for them too).
            return self.encode(text, bool(request.add_special_tokens))
        add_special = request.add_special_tokens is not False
        return self.encode(request.prompt or "", add_special)

    def tokenize(
        self,
        *,
        prompt: str | None,
        messages: list[dict[str, Any]] | None,
        add_special_tokens: bool,
        add_generation_prompt: bool,
    ) -> list[int]:
        """`/tokenize`'s ids: messages rendered with the template, or a prompt."""
        if messages is not None:
            text = render_chat(
                self.template,
                messages,
                add_generation_prompt=add_generation_prompt,
                special_tokens=self.special_tokens,
            )
            return self.encode(text, False)
        return self.encode(prompt or "", add_special_tokens)
