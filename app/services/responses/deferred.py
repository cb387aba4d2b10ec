"""A Responses request run from a deferred line: what the `response` kind of deferred
work (background responses) needs to run `POST /v1/responses` away from its HTTP
request, in the deferred lane of admission.

The request is the body the client sent, decoded and converted exactly as the route
does (a stored chain's items first, then `input`), checked against the key it was sent
with as the database has that key now (its models, priority and prefix-cache scope),
and run by `ResponsesService` as a stream of its events. It is billed as the usage row
`usage_record` makes, written with the line's answer (`DeferredStore.answer`), so it
is billed once whatever number of times the line was cut and run again."""

from __future__ import annotations

from app.schemas.responses import InputItem, ResponsesRequest, responses_request_decoder
from app.services.generation.deferred import as_key
from app.services.responses.request import ResponsesChatRequest, chat_request, stored_items
from app.services.responses.sealing import ReasoningSeal
from app.storage.responses import ResponseStore
from app.tenancy.keys.store import KeyRecord
from app.transport.request_body import decode_checked

ENDPOINT = "/v1/responses"


async def history(store: ResponseStore, owner: str, previous: str | None) -> list[InputItem]:
    """Every item of the stored chain ending in `previous`, oldest first (another
    owner's response, an expired one or an unknown id: 404; a chain over its bounds: 400)."""
    if previous is None:
        return []
    items: list[InputItem] = []
    for stored in await store.chain(owner, previous):
        items += stored_items(stored.input_items, stored.output_items)
    return items


def converted(
    body: ResponsesRequest, owner: str, seal: ReasoningSeal, items: list[InputItem]
) -> ResponsesChatRequest:
    return chat_request(body, owner, lambda blob, param: seal.open(owner, blob, param), items)


async def line_request(
    raw: bytes,
    owner: str,
    key: KeyRecord | None,
    seal: ReasoningSeal,
    store: ResponseStore,
) -> ResponsesChatRequest:
    """The chat request of a deferred line's Responses body, streamed (its events are
    what a deferred run records); errors are the route's."""
    body = decode_checked(raw, responses_request_decoder)
    items = await history(store, owner, body.previous_response_id)
    chat = as_key(converted(body, owner, seal, items), key)
    chat.stream = True
    chat.response_store = None  # the deferred run stores what it made, not the service
    return chat
