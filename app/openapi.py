"""The OpenAPI 3.1 document at GET /openapi.json, built from the wire types themselves.

Routes decode their bodies by hand (one msgspec pass, errors mapped in app.errors), so
Litestar cannot see the body types; this table names them instead, and every schema is
msgspec's own JSON Schema (2020-12, the dialect of OpenAPI 3.1) of the Struct the route
decodes or encodes: the document describes exactly what the decoders accept.
tests/unit/app/test_openapi.py holds the table to the app's routes.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import msgspec
from litestar import MediaType, Response, get

from app.routes.admin_keys import KeyChanges
from app.schemas.batches import Batch, BatchCreate, BatchList
from app.schemas.chat import ChatCompletion, ChatCompletionChunk, ChatCompletionRequest
from app.schemas.completions import Completion, CompletionRequest
from app.schemas.errors import ErrorEnvelope
from app.schemas.files import FileDeleted, FileList, FileWire
from app.schemas.messages import (
    AnthropicErrorEnvelope,
    CountTokensRequest,
    CountTokensResponse,
    MessageResponse,
    MessagesRequest,
    StreamEvent,
)
from app.schemas.models import ModelCard, ModelList
from app.schemas.responses import ResponsesRequest
from app.schemas.responses_output import Response as ResponseObject
from app.schemas.responses_output import StreamEvent as ResponsesStreamEvent
from app.schemas.stored_responses import InputItemList, ResponseDeleted
from app.schemas.tokenize import (
    DetokenizeRequest,
    DetokenizeResponse,
    TokenizeRequest,
    TokenizeResponse,
)

REF = "#/components/schemas/{name}"
JSON = "application/json"
SSE = "text/event-stream"
ERRORS = {
    "400": "Invalid request: `param` names the field",
    "401": "Missing or wrong admin key",
    "403": "No admin key configured",
    "404": "Unknown model, file or route, or a stored response unknown, expired or another key's",
    "409": "The model's state refuses the operator's change (pinned, busy, yielded)",
    "413": "An upload over `--max-file-bytes`, refused as it streams in",
    "415": "A body of the wrong media type",
    "429": "Over the client's fair share of the queue (`Retry-After`)",
    "500": "Engine failure",
    "503": "Loading, draining, yielded to the GPU's owner, queue full or a model that "
    "could not wake (`Retry-After`)",
}
STATUS_OBJECT: dict[str, Any] = {"type": "object", "additionalProperties": True}
ADMIN_ERRORS = ("400", "401", "403")
KEY_ID = ("key_id", "path", {"type": "string"})
MODEL_ID = ("model_id", "path", {"type": "string"})
BATCH_ID = ("batch_id", "path", {"type": "string"})
FILE_ID = ("file_id", "path", {"type": "string"})
FILE_UPLOAD: dict[str, Any] = {
    "type": "object",
    "properties": {
        "file": {"type": "string", "format": "binary"},
        "purpose": {"type": "string", "enum": ["batch"]},
    },
    "required": ["file", "purpose"],
}
RESPONSE_ID = ("response_id", "path", {"type": "string"})
INCLUDE = ("include", "query", {"type": "array", "items": {"type": "string"}})


@dataclass(frozen=True)
class Route:
    method: str
    path: str
    summary: str
    body: type | dict[str, Any] | None = None  # a Struct, or an inline schema
    ok: type | dict[str, Any] | None = None  # a Struct, or an inline schema
    ok_media: str = JSON
    streams: Any = None  # the chunk type of `stream: true` (a Struct, or a union of them)
    errors: tuple[str, ...] = ("400", "404", "429", "500", "503")
    tags: tuple[str, ...] = field(default=())
    # (name, where, JSON schema): path and query parameters
    params: tuple[tuple[str, str, dict[str, Any]], ...] = ()
    error_body: type = ErrorEnvelope  # Anthropic's routes answer in Anthropic's shape
    body_media: str = JSON  # the request body's media type
    stream_text: str = (
        "Server-sent events: `data: <{name}>` per chunk, `data: <ErrorEnvelope>` if the "
        "engine fails mid-stream, then `data: [DONE]`."
    )


ANTHROPIC_STREAM = (
    "Server-sent events as Anthropic sends them: `event: <type>` and `data: <{name}>` "
    "(message_start, ping, content_block_start / _delta / _stop, message_delta, "
    "message_stop); `event: error` with `data: <AnthropicErrorEnvelope>` if the engine "
    "fails mid-stream."
)
RESPONSES_STREAM = (
    "Server-sent events as OpenAI sends them: `event: <type>` and `data: <{name}>`, "
    "each with `sequence_number` (response.created, response.in_progress, "
    "response.output_item.added / .done, response.content_part.added / .done, "
    "response.output_text.delta / .done, response.reasoning_text.delta / .done, "
    "response.function_call_arguments.delta / .done, then response.completed or "
    "response.incomplete); an `error` event and `response.failed` if the engine fails "
    "mid-stream. No `[DONE]`."
)
BETA = ("beta", "query", {"type": "string"})  # Anthropic SDKs' `?beta=true`: accepted


ROUTES = (
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
    Route(
        "post",
        "/v1/responses",
        "OpenAI Responses API: a response, whole or streamed (SSE), stored unless "
        "`store: false`; hosted tools are not served (`X-Tools-Not-Served`)",
        ResponsesRequest,
        ResponseObject,
        streams=ResponsesStreamEvent,
        stream_text=RESPONSES_STREAM,
    ),
    Route(
        "post",
        "/v1/batches",
        "Create a batch from an uploaded JSONL file (purpose `batch`)",
        BatchCreate,
        Batch,
        errors=("400", "404"),
    ),
    Route(
        "get",
        "/v1/batches",
        "The key's batches, newest first",
        ok=BatchList,
        errors=("400",),
        params=(("after", "query", {"type": "string"}), ("limit", "query", {"type": "integer"})),
    ),
    Route(
        "get",
        "/v1/batches/{batch_id}",
        "One batch",
        ok=Batch,
        errors=("404",),
        params=(BATCH_ID,),
    ),
    Route(
        "post",
        "/v1/batches/{batch_id}/cancel",
        "Cancel a batch: lines not started are not run",
        ok=Batch,
        errors=("404", "409"),
        params=(BATCH_ID,),
    ),
    Route("get", "/v1/models", "The served models", ok=ModelList, errors=()),
    Route(
        "get",
        "/v1/models/{model_id}",
        "One served model (its id may contain `/`)",
        ok=ModelCard,
        errors=("404",),
        params=(MODEL_ID,),
    ),
    Route(
        "post",
        "/v1/files",
        "Upload a file (multipart: `file`, `purpose` `batch`); a batch file is checked "
        "line by line",
        FILE_UPLOAD,
        FileWire,
        body_media="multipart/form-data",
        errors=("400", "413", "415"),
    ),
    Route(
        "get",
        "/v1/files",
        "The key's files, a page at a time",
        ok=FileList,
        errors=("400", "404"),
        params=(
            ("purpose", "query", {"type": "string"}),
            ("limit", "query", {"type": "integer", "minimum": 1, "maximum": 10000}),
            ("after", "query", {"type": "string"}),
            ("order", "query", {"type": "string", "enum": ["asc", "desc"]}),
        ),
    ),
    Route(
        "get",
        "/v1/files/{file_id}",
        "One of the key's files",
        ok=FileWire,
        errors=("404",),
        params=(FILE_ID,),
    ),
    Route(
        "get",
        "/v1/files/{file_id}/content",
        "A file's content, as uploaded or written",
        ok={"type": "string", "format": "binary"},
        ok_media="application/octet-stream",
        errors=("404",),
        params=(FILE_ID,),
    ),
    Route(
        "delete",
        "/v1/files/{file_id}",
        "Delete one of the key's files",
        ok=FileDeleted,
        errors=("404",),
        params=(FILE_ID,),
    ),
    Route(
        "get",
        "/v1/responses/{response_id}",
        "A stored response of this key; `stream=true` (background responses) is a 400",
        ok=ResponseObject,
        errors=("400", "404", "503"),
        params=(RESPONSE_ID, ("stream", "query", {"type": "boolean"}), INCLUDE),
    ),
    Route(
        "delete",
        "/v1/responses/{response_id}",
        "Delete a stored response of this key",
        ok=ResponseDeleted,
        errors=("404", "503"),
        params=(RESPONSE_ID,),
    ),
    Route(
        "get",
        "/v1/responses/{response_id}/input_items",
        "The input items of a stored response, a page at a time",
        ok=InputItemList,
        errors=("400", "404", "503"),
        params=(
            RESPONSE_ID,
            ("after", "query", {"type": "string"}),
            ("before", "query", {"type": "string"}),
            ("limit", "query", {"type": "integer", "minimum": 1, "maximum": 100, "default": 20}),
            ("order", "query", {"type": "string", "enum": ["asc", "desc"], "default": "desc"}),
            INCLUDE,
        ),
    ),
    Route(
        "get",
        "/health",
        "Ready and admitting",
        ok={"type": "object", "properties": {"status": {"type": "string"}}, "required": ["status"]},
        errors=("503",),
    ),
    Route(
        "get",
        "/health/live",
        "Alive: the process and engine are healthy, yielded or not",
        ok={"type": "object", "properties": {"status": {"type": "string"}}, "required": ["status"]},
        errors=("503",),
    ),
    Route(
        "get",
        "/metrics",
        "Prometheus metrics",
        ok={"type": "string"},
        ok_media="text/plain",
        errors=(),
    ),
    Route(
        "get",
        "/admin/admission",
        "Admission state (admin key)",
        ok=STATUS_OBJECT,
        errors=("401", "403"),
    ),
    Route(
        "post",
        "/admin/admission/drain",
        "Stop lending until resumed (admin key)",
        ok=STATUS_OBJECT,
        errors=("401", "403"),
    ),
    Route(
        "post",
        "/admin/admission/resume",
        "Resume lending (admin key)",
        ok=STATUS_OBJECT,
        errors=("401", "403"),
    ),
    Route(
        "get",
        "/admin/models",
        "Served models: state, keep-alive, memory (admin key)",
        ok=STATUS_OBJECT,
        errors=("401", "403"),
    ),
    Route(
        "post",
        "/admin/models/{model_id}/sleep",
        "Put an idle model to sleep (admin key)",
        ok=STATUS_OBJECT,
        errors=("401", "403", "404", "409"),
        params=(MODEL_ID,),
    ),
    Route(
        "post",
        "/admin/models/{model_id}/wake",
        "Wake a model (admin key)",
        ok=STATUS_OBJECT,
        errors=("401", "403", "404", "503"),
        params=(MODEL_ID,),
    ),
    Route("get", "/admin/keys", "API keys (admin key)", ok=STATUS_OBJECT, errors=ADMIN_ERRORS),
    Route(
        "post",
        "/admin/keys",
        "Create an API key; its secret is returned once (admin key)",
        KeyChanges,
        STATUS_OBJECT,
        errors=ADMIN_ERRORS,
    ),
    Route(
        "patch",
        "/admin/keys/{key_id}",
        "Change a key's limits (admin key)",
        KeyChanges,
        STATUS_OBJECT,
        errors=(*ADMIN_ERRORS, "404"),
        params=(KEY_ID,),
    ),
    Route(
        "delete",
        "/admin/keys/{key_id}",
        "Revoke a key (admin key)",
        ok=STATUS_OBJECT,
        errors=(*ADMIN_ERRORS, "404"),
        params=(KEY_ID,),
    ),
    Route(
        "get",
        "/admin/batches",
        "Every key's batches, newest first, and this replica's runner (admin key)",
        ok=STATUS_OBJECT,
        errors=ADMIN_ERRORS,
        params=(
            ("status", "query", {"type": "string"}),
            ("after", "query", {"type": "string"}),
            ("limit", "query", {"type": "integer"}),
        ),
    ),
    Route(
        "get",
        "/admin/usage",
        "Usage by key, model, day or batch (admin key)",
        ok=STATUS_OBJECT,
        errors=ADMIN_ERRORS,
        params=(
            ("by", "query", {"type": "string", "enum": ["key", "model", "day", "batch"]}),
            ("since", "query", {"type": "string"}),
            ("until", "query", {"type": "string"}),
        ),
    ),
)


def _ref(kind: type) -> dict[str, Any]:
    return {"$ref": REF.format(name=kind.__name__)}


def _name(kind: Any) -> str:
    return getattr(kind, "__name__", "StreamEvent")


def _event_schema(kind: Any) -> dict[str, Any]:
    """A chunk Struct's reference, or for a union of event Structs one of theirs."""
    if isinstance(kind, type):
        return _ref(kind)
    return {"oneOf": [_ref(member) for member in typing.get_args(kind)]}


def _kinds(kind: Any) -> list[type]:
    if kind is None or isinstance(kind, dict):
        return []
    return [kind] if isinstance(kind, type) else list(typing.get_args(kind))


def _schema(kind: type | dict[str, Any]) -> dict[str, Any]:
    return kind if isinstance(kind, dict) else _ref(kind)


def _operation(route: Route) -> dict[str, Any]:
    ok_content: dict[str, Any] = {}
    if route.ok is not None:
        ok_content[route.ok_media] = {"schema": _schema(route.ok)}
    if route.streams is not None:
        ok_content[SSE] = {
            "schema": {
                "type": "string",
                "description": route.stream_text.format(name=_name(route.streams)),
            },
            "x-event-schema": _event_schema(route.streams),
        }
    responses: dict[str, Any] = {"200": {"description": "OK", "content": ok_content}}
    for status in route.errors:
        responses[status] = {
            "description": ERRORS[status],
            "content": {JSON: {"schema": _ref(route.error_body)}},
        }
    operation: dict[str, Any] = {"summary": route.summary, "responses": responses}
    path_id = route.path.replace("/", "_").replace("{", "").replace("}", "")
    operation["operationId"] = f"{route.method}{path_id}"
    if route.params:
        operation["parameters"] = [
            {"name": name, "in": where, "required": where == "path", "schema": schema}
            for name, where, schema in route.params
        ]
    if route.body is not None:
        operation["requestBody"] = {
            "required": True,
            "content": {route.body_media: {"schema": _schema(route.body)}},
        }
    return operation


@lru_cache(maxsize=1)
def document() -> dict[str, Any]:
    kinds = {
        kind
        for route in ROUTES
        for part in (route.body, route.ok, route.streams)
        for kind in _kinds(part)
    }
    kinds.update(route.error_body for route in ROUTES)
    kinds.add(ErrorEnvelope)
    _, components = msgspec.json.schema_components(
        sorted(kinds, key=lambda k: k.__name__), ref_template=REF
    )
    paths: dict[str, Any] = {}
    for route in ROUTES:
        paths.setdefault(route.path, {})[route.method] = _operation(route)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "lilac-serve",
            "version": "1",
            "summary": "OpenAI-compatible API, and Anthropic's Messages API",
        },
        "paths": paths,
        "components": {"schemas": components},
    }


_encoded: bytes | None = None


@get("/openapi.json", include_in_schema=False)
async def openapi_json() -> Response[bytes]:
    global _encoded
    if _encoded is None:
        _encoded = msgspec.json.encode(document())
    return Response(_encoded, media_type=MediaType.JSON)
