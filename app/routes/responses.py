"""POST /v1/responses: OpenAI's Responses API.

Requests are converted to chat requests and run as chat runs (app.services.responses.service);
`previous_response_id` continues a stored chain of the same owner (the request's key).
The request's tools that are not served (OpenAI's hosted tools) are named in the
`X-Tools-Not-Served` header and the Response's `tools_not_served`.
"""

from __future__ import annotations

import re

import msgspec
from litestar import MediaType, Request, Response, post
from litestar.response import Stream

from app.routes.deps import BackgroundDep, ResponsesDep, ResponseStoreDep, TenancyDep
from app.routes.follow import followed, follower_slot
from app.routes.respond import respond
from app.schemas.responses import InputItem, ResponsesRequest, responses_request_decoder
from app.services.generation.deferred import as_key
from app.services.responses.deferred import converted, history
from app.services.responses.request import ResponsesChatRequest
from app.services.responses.sealing import ReasoningSeal
from app.tenancy.consumes import Consumes
from app.tenancy.scope import owner_of
from app.tenancy.service import Tenancy, request_key
from app.transport.request_body import INLINE_BYTES, read_json
from engine.offload import off_loop

NOT_SERVED_HEADER = "X-Tools-Not-Served"
_HEADER_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")


@post("/v1/responses", status_code=200)
async def create_response(
    request: Request,
    responses: ResponsesDep,
    tenancy: TenancyDep,
    response_store: ResponseStoreDep,
    background: BackgroundDep,
) -> Response[bytes] | Stream:
    body = await read_json(request, responses_request_decoder)
    owner = owner_of(request_key(request))
    items = await history(response_store, owner, body.previous_response_id)
    raw = await request.body()
    size = len(raw)
    if size <= INLINE_BYTES:
        chat = _converted(body, owner, responses.seal, items)
    else:
        chat = await off_loop(_converted, body, owner, responses.seal, items)
    chat.response_store = response_store if body.store else None
    response: Response[bytes] | Stream
    if body.background:
        response = await _queued(request, background, tenancy, chat, raw)
    else:
        response = await respond(request, responses, tenancy, chat, size)
    # Tool types come from the client: only plain names go into the header.
    names = [name for name in chat.tools_not_served if _HEADER_NAME.fullmatch(name)]
    if names:
        response.headers[NOT_SERVED_HEADER] = ",".join(names)
    return response


def _converted(
    body: ResponsesRequest, owner: str, seal: ReasoningSeal, items: list[InputItem]
) -> ResponsesChatRequest:
    return converted(body, owner, seal, items)


async def _queued(
    request: Request,
    background: BackgroundDep,
    tenancy: Tenancy,
    chat: ResponsesChatRequest,
    raw: bytes,
) -> Response[bytes] | Stream:
    """`background: true`: the response stored `queued` and run on spare capacity; with
    `stream: true`, its events as they are stored (a follower: app.routes.follow)."""
    key = request_key(request)
    as_key(chat, key)  # a model the key may not use: 404 now
    tenancy.refuse_if_elsewhere(key, chat.model)  # served by another replica: 429 now
    if key is not None:  # one of the key's requests per minute (429 past them)
        await tenancy.admit(key, Consumes("/v1/responses", chat.model))
    if not chat.source.stream:
        queued = await background.create(chat, raw, key if tenancy.mode == "keys" else None)
        return Response(msgspec.json.encode(queued), media_type=MediaType.JSON)
    slot = follower_slot(request)  # before the create: a refused stream queues nothing
    try:
        queued = await background.create(chat, raw, key if tenancy.mode == "keys" else None)
        events = await background.replay(chat.owner, queued.id, -1)
    except BaseException:
        slot.release()
        raise
    return followed(events, slot)
