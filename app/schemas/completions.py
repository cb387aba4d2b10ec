"""Wire types of the legacy POST /v1/completions."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec
from msgspec import UNSET, Meta, Struct, UnsetType

from app.schemas.chat import Usage
from app.schemas.sampling import PositiveInt, SamplingFields

Prompt = Annotated[str, Meta(min_length=1)]


class CompletionRequest(SamplingFields, kw_only=True):
    prompt: Prompt | Annotated[list[Prompt], Meta(min_length=1, max_length=64)]
    max_tokens: PositiveInt = 16
    echo: bool = False
    # The number of alternatives per token to return (OpenAI allows up to 5).
    logprobs: Annotated[int, Meta(ge=0, le=5)] | None = None


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


class Completion(Struct, kw_only=True):
    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage | UnsetType | None = UNSET
    system_fingerprint: str | None = None


completion_request_decoder = msgspec.json.Decoder(CompletionRequest)
