"""A served model's prompts -> token ids: a chat rendered with its template (with the
family's tool context and the documents) and encoded, or a plain prompt encoded.

`VLLMEngine.bind_family` builds the `Prompts` of the model it serves; prompt token ids a
request brings are checked and taken as they are by the engine.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engine.families import Family
from engine.prompt_bound import PromptBound, prompt_bound
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
    bound: PromptBound | None = None  # a text this long is refused untokenized

    @classmethod
    def of(
        cls, tokenizer: Any, template: str, family: Family | None, max_model_len: int = 0
    ) -> Prompts:
        special_tokens = {
            "bos_token": tokenizer.bos_token or "",
            "eos_token": tokenizer.eos_token or "",
        }
        bound = prompt_bound(tokenizer, max_model_len)
        return cls(template, special_tokens, encoder(tokenizer), family, bound)

    def _bounded(self, text: str, request: GenerateRequest | None = None) -> str:
        """`text`, unless it is too long for the context whatever its tokens (a request
        that truncates its prompt keeps its last tokens instead)."""
        if self.bound is not None and (request is None or request.truncate_prompt_tokens is None):
            self.bound.check(text, request.sampling.max_tokens if request is not None else None)
        return text

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
            return self.encode(self._bounded(text, request), bool(request.add_special_tokens))
        add_special = request.add_special_tokens is not False
        return self.encode(self._bounded(request.prompt or "", request), add_special)

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
            return self.encode(self._bounded(text), False)
        return self.encode(self._bounded(prompt or ""), add_special_tokens)
