"""Wire types of POST /tokenize and /detokenize (as `vllm serve` has them)."""

from __future__ import annotations

from typing import Annotated

import msgspec
from msgspec import Meta, Struct

from app.schemas.chat import Message
from app.schemas.sampling import check_model_name


class TokenizeRequest(Struct, kw_only=True):
    model: str | None = None
    prompt: str | None = None
    messages: Annotated[list[Message], Meta(min_length=1)] | None = None
    add_special_tokens: bool = True
    add_generation_prompt: bool = True

    def __post_init__(self) -> None:
        check_model_name(self.model)


class TokenizeResponse(Struct):
    count: int
    max_model_len: int
    tokens: list[int]


class DetokenizeRequest(Struct, kw_only=True):
    tokens: list[Annotated[int, Meta(ge=0)]]
    model: str | None = None

    def __post_init__(self) -> None:
        check_model_name(self.model)


class DetokenizeResponse(Struct):
    prompt: str


tokenize_request_decoder = msgspec.json.Decoder(TokenizeRequest)
detokenize_request_decoder = msgspec.json.Decoder(DetokenizeRequest)
