"""Wire types of the legacy POST /v1/completions."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from msgspec import UNSET, Meta, Struct, UnsetType

from app.schemas.chat import Usage
from app.schemas.extensions import PromptLogprobs
from app.schemas.sampling import PositiveInt, SamplingFields, TokenId
from app.schemas.tools import ResponseFormat

Prompt = Annotated[str, Meta(min_length=1)]
TokenPrompt = Annotated[list[TokenId], Meta(min_length=1)]
MAX_PROMPTS = 64
# A string; or a list of strings, of token ids (one pre-tokenized prompt) or of lists of
# token ids (msgspec takes one array type per union: the service checks that a list
# holds one kind, and at most MAX_PROMPTS prompts).
PromptField = Prompt | Annotated[list[Prompt | TokenId | TokenPrompt], Meta(min_length=1)]


class CompletionRequest(SamplingFields, kw_only=True):
    prompt: PromptField
    max_tokens: PositiveInt = 16
    echo: bool = False
    # The number of alternatives per token to return (OpenAI allows up to 5).
    logprobs: Annotated[int, Meta(ge=0, le=5)] | None = None
    response_format: ResponseFormat | None = None  # vLLM takes it here too
    suffix: Any = UNSET  # refused (app.services.generation.extensions.REFUSED)


class CompletionLogprobs(Struct):
    tokens: list[str]
    token_logprobs: list[float | None]
    top_logprobs: list[dict[str, float] | None]
    text_offset: list[int]


class CompletionChoice(Struct, kw_only=True):
    index: int
    text: str
    logprobs: CompletionLogprobs | None = None
    finish_reason: str | None = None
    # vLLM's, when the request asked for `prompt_logprobs` (never encoded otherwise).
    prompt_logprobs: PromptLogprobs | UnsetType | None = UNSET


class Completion(Struct, kw_only=True):
    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage | UnsetType | None = UNSET
    system_fingerprint: str | None = None


completion_request_decoder = msgspec.json.Decoder(CompletionRequest)
