"""What the generation endpoints share: identify the client, then answer with a JSON
body or an SSE stream. Services come by dependency injection (app.main)."""

from __future__ import annotations

from typing import Any, Protocol

import msgspec
from litestar import MediaType, Request, Response
from litestar.response import Stream

from app.routes.disconnect import until_disconnected
from app.services.admission import client_key

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
_encoder = msgspec.json.Encoder()


class GenerationService(Protocol):
    async def complete(self, request: Any, client: str | None = None) -> Any: ...

    async def open_stream(self, request: Any, client: str | None = None) -> Any: ...


async def respond(
    request: Request, service: GenerationService, body: Any
) -> Response[bytes] | Stream:
    """`body` is the decoded request; errors raised here map in app.errors."""
    client = client_key(request, body.user)
    if body.stream:
        # Admission, the queue and the first token: a client gone meanwhile ends them.
        frames = await until_disconnected(request, service.open_stream(body, client))
        return Stream(frames, media_type="text/event-stream", headers=SSE_HEADERS)
    result = await until_disconnected(request, service.complete(body, client))
    return Response(_encoder.encode(result), media_type=MediaType.JSON)
