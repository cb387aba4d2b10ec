"""POST /v1/chat/completions."""

from __future__ import annotations

from litestar import MediaType, Request, Response, post
from litestar.response import Stream

from app.schemas.chat import chat_request_decoder
from app.services.admission import client_key
from app.services.chat import ChatService

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


@post("/v1/chat/completions", status_code=200)
async def create_chat_completion(request: Request) -> Response[bytes] | Stream:
    chat: ChatService = request.app.state.chat
    body = chat_request_decoder.decode(await request.body())
    client = client_key(request, body.user)
    if body.stream:
        frames = await chat.open_stream(body, client)
        return Stream(frames, media_type="text/event-stream", headers=SSE_HEADERS)
    completion = await chat.complete(body, client)
    return Response(request.app.state.encoder.encode(completion), media_type=MediaType.JSON)
