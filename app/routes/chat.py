"""POST /v1/chat/completions."""

from __future__ import annotations

from litestar import Request, Response, post
from litestar.response import Stream

from app.request_body import read_json
from app.routes.deps import ChatDep, TenancyDep
from app.routes.respond import respond
from app.schemas.chat import chat_request_decoder


@post("/v1/chat/completions", status_code=200)
async def create_chat_completion(
    request: Request, chat: ChatDep, tenancy: TenancyDep
) -> Response[bytes] | Stream:
    body = await read_json(request, chat_request_decoder)
    return await respond(request, chat, tenancy, body, len(await request.body()))
