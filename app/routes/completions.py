"""POST /v1/completions (legacy text completions)."""

from __future__ import annotations

from litestar import MediaType, Request, Response, post
from litestar.response import Stream

from app.routes.chat import SSE_HEADERS
from app.schemas.completions import completion_request_decoder
from app.services.completions import CompletionService


@post("/v1/completions", status_code=200)
async def create_completion(request: Request) -> Response[bytes] | Stream:
    service: CompletionService = request.app.state.completions
    body = completion_request_decoder.decode(await request.body())
    if body.stream:
        frames = await service.open_stream(body)
        return Stream(frames, media_type="text/event-stream", headers=SSE_HEADERS)
    completion = await service.complete(body)
    return Response(request.app.state.encoder.encode(completion), media_type=MediaType.JSON)
