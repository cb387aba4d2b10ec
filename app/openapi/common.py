"""What every API's route table shares: the `Route` row, the error texts, common params."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from app.schemas.errors import ErrorEnvelope

REF = "#/components/schemas/{name}"
JSON = "application/json"
SSE = "text/event-stream"
ERRORS = {
    "400": "Invalid request: `param` names the field",
    "401": "Missing or wrong admin key",
    "403": "No admin key configured",
    "404": "Unknown model, file or route, or a stored response unknown, expired or another key's",
    "409": "The model's state refuses the operator's change (pinned, busy, yielded)",
    "413": "An upload over `--max-file-bytes`, refused as it streams in, or past the key's "
    "`--max-stored-bytes-per-key`",
    "415": "A body of the wrong media type",
    "429": "Over the client's fair share of the queue (`Retry-After`)",
    "500": "Engine failure",
    "503": "Loading, draining, yielded to the GPU's owner, queue full or a model that "
    "could not wake (`Retry-After`)",
}
STATUS_OBJECT: dict[str, Any] = {"type": "object", "additionalProperties": True}
MODEL_ID = ("model_id", "path", {"type": "string"})


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
