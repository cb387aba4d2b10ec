"""POST /v1/chat/completions."""

from __future__ import annotations

from litestar import Request, Response, post
from litestar.response import Stream

from app.routes.deps import ChatDep
from app.routes.respond import respond
from app.schemas.chat import chat_request_decoder
from app.tenancy.service import request_tenancy
from app.transport.request_body import read_json


@post("/v1/chat/completions", status_code=200)
async def create_chat_completion(request: Request, chat: ChatDep) -> Response[bytes] | Stream:
    # One dependency: the tenancy comes from the scope (see request_tenancy).
    body = await read_json(request, chat_request_decoder)
    return await respond(request, chat, request_tenancy(request), body, len(await request.body()))
