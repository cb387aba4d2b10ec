"""OpenAI's chat and legacy completions, tokenize / detokenize, and the model list."""

from __future__ import annotations

from app.openapi.common import MODEL_ID, Route
from app.schemas.chat import ChatCompletion, ChatCompletionChunk, ChatCompletionRequest
from app.schemas.completions import Completion, CompletionRequest
from app.schemas.models import ModelCard, ModelList
from app.schemas.tokenize import (
    DetokenizeRequest,
    DetokenizeResponse,
    TokenizeRequest,
    TokenizeResponse,
)

GENERATION = (
    Route(
        "post",
        "/v1/chat/completions",
        "Chat completion, whole or streamed (SSE)",
        ChatCompletionRequest,
        ChatCompletion,
        streams=ChatCompletionChunk,
    ),
    Route(
        "post",
        "/v1/completions",
        "Legacy text completion, whole or streamed (SSE)",
        CompletionRequest,
        Completion,
        streams=Completion,
    ),
    Route(
        "post",
        "/tokenize",
        "Token ids of a prompt or of rendered messages",
        TokenizeRequest,
        TokenizeResponse,
        errors=("400", "404", "503"),
    ),
    Route(
        "post",
        "/detokenize",
        "Text of token ids",
        DetokenizeRequest,
        DetokenizeResponse,
        errors=("400", "404", "503"),
    ),
)

MODELS = (
    Route("get", "/v1/models", "The served models", ok=ModelList, errors=()),
    Route(
        "get",
        "/v1/models/{model_id}",
        "One served model (its id may contain `/`)",
        ok=ModelCard,
        errors=("404",),
        params=(MODEL_ID,),
    ),
)
