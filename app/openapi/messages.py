"""Anthropic's Messages API: messages and count_tokens, answering in Anthropic's shape."""

from __future__ import annotations

from app.openapi.common import Route
from app.schemas.messages import (
    AnthropicErrorEnvelope,
    CountTokensRequest,
    CountTokensResponse,
    MessageResponse,
    MessagesRequest,
    StreamEvent,
)

ANTHROPIC_STREAM = (
    "Server-sent events as Anthropic sends them: `event: <type>` and `data: <{name}>` "
    "(message_start, ping, content_block_start / _delta / _stop, message_delta, "
    "message_stop); `event: error` with `data: <AnthropicErrorEnvelope>` if the engine "
    "fails mid-stream."
)
BETA = ("beta", "query", {"type": "string"})  # Anthropic SDKs' `?beta=true`: accepted

ROUTES = (
    Route(
        "post",
        "/v1/messages",
        "Anthropic Messages API: a message, whole or streamed (SSE); `max_tokens` over "
        "the context's room is clamped (`X-Max-Tokens-Clamped`)",
        MessagesRequest,
        MessageResponse,
        streams=StreamEvent,
        error_body=AnthropicErrorEnvelope,
        stream_text=ANTHROPIC_STREAM,
        params=(BETA,),
    ),
    Route(
        "post",
        "/v1/messages/count_tokens",
        "Anthropic Messages API: the input tokens of a request",
        CountTokensRequest,
        CountTokensResponse,
        errors=("400", "404", "503"),
        error_body=AnthropicErrorEnvelope,
        params=(BETA,),
    ),
)
