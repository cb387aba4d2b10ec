"""POST /v1/responses: OpenAI's Responses API.

Requests are converted to chat requests and run as chat runs (app.services.responses);
`previous_response_id` continues a stored chain of the same owner (the request's key).
The request's tools that are not served (OpenAI's hosted tools) are named in the
`X-Tools-Not-Served` header and the Response's `tools_not_served`.
"""

from __future__ import annotations

from litestar import Request, Response, post
from litestar.response import Stream

from app.request_body import INLINE_BYTES, read_json
from app.routes.deps import ResponsesDep, ResponseStoreDep, TenancyDep
from app.routes.respond import respond
from app.schemas.responses import InputItem, ResponsesRequest, responses_request_decoder
from app.services.responses_request import ResponsesChatRequest, chat_request, stored_items
from app.services.responses_sealing import ReasoningSeal
from app.storage.database import owner_of
from app.storage.responses import ResponseStore
from app.tenancy.service import request_key
from engine.offload import off_loop

NOT_SERVED_HEADER = "X-Tools-Not-Served"


@post("/v1/responses", status_code=200)
async def create_response(
    request: Request,
    responses: ResponsesDep,
    tenancy: TenancyDep,
    response_store: ResponseStoreDep,
) -> Response[bytes] | Stream:
    body = await read_json(request, responses_request_decoder)
    owner = owner_of(request_key(request))
    history = await _history(response_store, owner, body.previous_response_id)
    size = len(await request.body())
    if size <= INLINE_BYTES:
        chat = _converted(body, owner, responses.seal, history)
    else:
        chat = await off_loop(_converted, body, owner, responses.seal, history)
    chat.response_store = response_store if body.store else None
    response = await respond(request, responses, tenancy, chat, size)
    if chat.tools_not_served:
        response.headers[NOT_SERVED_HEADER] = ",".join(chat.tools_not_served)
    return response


def _converted(
    body: ResponsesRequest, owner: str, seal: ReasoningSeal, history: list[InputItem]
) -> ResponsesChatRequest:
    return chat_request(body, owner, lambda blob, param: seal.open(owner, blob, param), history)


async def _history(store: ResponseStore, owner: str, previous: str | None) -> list[InputItem]:
    """Every item of the stored chain ending in `previous`, oldest first (another
    owner's response, an expired one or an unknown id: 404; a chain over its bounds: 400)."""
    if previous is None:
        return []
    items: list[InputItem] = []
    for stored in await store.chain(owner, previous):
        items += stored_items(stored.input_items, stored.output_items)
    return items
