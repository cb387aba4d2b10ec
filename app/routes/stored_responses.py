"""GET and DELETE /v1/responses/{id}, GET /v1/responses/{id}/input_items, and for a
background response POST /v1/responses/{id}/cancel and GET /v1/responses/{id}?stream=true
(its events again, `starting_after` a sequence number): a key's own stored responses.
Another key's response, an expired one and an unknown id are the same 404
`response_not_found`. A stream holds one of the key's follower slots while it is open
(app.routes.follow)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec
from litestar import MediaType, Request, Response, delete, get, post
from litestar.response import Stream

from app.errors import InvalidRequest
from app.routes.deps import BackgroundDep, ResponseStoreDep
from app.routes.follow import followed, follower_slot
from app.schemas.stored_responses import InputItemList, ItemId, ResponseDeleted
from app.storage.responses import StoredResponse
from app.tenancy.scope import owner_of
from app.tenancy.service import request_key

MAX_PAGE = 100
DEFAULT_PAGE = 20
_items = msgspec.json.Decoder(list[msgspec.Raw])
_item_id = msgspec.json.Decoder(ItemId)
_TRUE = {"true", "1"}
_FALSE = {"false", "0"}
MAX_DIGITS = 12  # a sequence number longer than this is out of any range


def _owner(request: Request[Any, Any, Any]) -> str:
    return owner_of(request_key(request))


@get("/v1/responses/{response_id:str}")
async def retrieve_response(
    request: Request[Any, Any, Any],
    response_store: ResponseStoreDep,
    background: BackgroundDep,
    response_id: str,
) -> Response[bytes] | Stream:
    """The stored Response object (a background response's as it is now); with
    `stream=true`, a background response's events after `starting_after`, then live."""
    query = request.query_params
    stream = _flag(query.get("stream"), "stream")
    after = _sequence_number(query.get("starting_after"))
    if not stream:
        stored = await response_store.get(_owner(request), response_id)
        return Response(stored.response, media_type=MediaType.JSON)
    slot = follower_slot(request)  # before any work: past the key's bound, a 429
    try:
        events = await background.replay(_owner(request), response_id, after)
    except BaseException:
        slot.release()
        raise
    return followed(events, slot)


@post("/v1/responses/{response_id:str}/cancel", status_code=200)
async def cancel_response(
    request: Request[Any, Any, Any], background: BackgroundDep, response_id: str
) -> Response[bytes]:
    """Cancel a background response: the Response, `cancelled`."""
    body = await background.cancel(_owner(request), response_id)
    return Response(body, media_type=MediaType.JSON)


def _flag(text: str | None, param: str) -> bool:
    if text is None:
        return False
    value = text.lower()
    if value not in _TRUE | _FALSE:
        raise InvalidRequest(f"`{param}` must be `true` or `false`.", param=param)
    return value in _TRUE


def _sequence_number(text: str | None) -> int:
    """`starting_after`: a sequence number (0 or more); -1 when absent (every event)."""
    if text is None:
        return -1
    if not (text.isascii() and text.isdigit()) or len(text) > MAX_DIGITS:
        raise InvalidRequest(
            "`starting_after` must be an event's sequence number, an integer from 0.",
            param="starting_after",
        )
    return int(text)


@delete("/v1/responses/{response_id:str}", status_code=200)
async def delete_response(
    request: Request[Any, Any, Any],
    response_store: ResponseStoreDep,
    background: BackgroundDep,
    response_id: str,
) -> ResponseDeleted:
    """A background response still running is cancelled first (what it ran is billed);
    its events and job go with it."""
    await background.stop(_owner(request), response_id)
    await response_store.delete(_owner(request), response_id)
    return ResponseDeleted(id=response_id)


@dataclass(frozen=True, slots=True)
class Page:
    after: str | None
    before: str | None
    limit: int
    ascending: bool


def page_of(query: Any) -> Page:
    """`after`, `before`, `limit` (1 to 100, default 20) and `order` (`asc` or `desc`,
    default `desc`); `include` is accepted: items are returned whole, as stored."""
    text = query.get("limit")
    limit = DEFAULT_PAGE
    if text is not None:
        try:
            limit = int(text)
        except ValueError:
            limit = 0
        if not 1 <= limit <= MAX_PAGE:
            raise InvalidRequest(f"`limit` must be an integer from 1 to {MAX_PAGE}.", param="limit")
    order = query.get("order", "desc")
    if order not in ("asc", "desc"):
        raise InvalidRequest("`order` must be `asc` or `desc`.", param="order")
    return Page(query.get("after"), query.get("before"), limit, order == "asc")


def _position(ids: list[str | None], cursor: str, param: str) -> int:
    try:
        return ids.index(cursor)
    except ValueError:
        shown = cursor[:80]
        message = f"No input item with id '{shown}' in this response."
        raise InvalidRequest(message, param=param) from None


def list_page(items: list[msgspec.Raw], page: Page) -> InputItemList:
    """The page of `items` (oldest first, as stored) that `page` asks for. `after` pages
    on from an item, `before` back from one (the `limit` items nearest it)."""
    ordered = items if page.ascending else items[::-1]
    ids = [_item_id.decode(item).id for item in ordered]
    start, end = 0, len(ordered)
    if page.after is not None:
        start = _position(ids, page.after, "after") + 1
    if page.before is not None:
        end = _position(ids, page.before, "before")
    window = list(range(start, max(start, end)))
    has_more = len(window) > page.limit
    if page.before is not None and page.after is None:
        window = window[-page.limit :]
    else:
        window = window[: page.limit]
    data = [ordered[i] for i in window]
    first = ids[window[0]] if window else None
    last = ids[window[-1]] if window else None
    return InputItemList(data=data, first_id=first, last_id=last, has_more=has_more)


def context_items(chain: list[StoredResponse]) -> list[msgspec.Raw]:
    """The items a response's request saw, oldest first: each response it continued,
    its input items then its output items, then the response's own input items. An item
    given again (an earlier output sent back as input, the same `id`) is listed once."""
    documents = [
        doc for earlier in chain[:-1] for doc in (earlier.input_items, earlier.output_items)
    ]
    documents.append(chain[-1].input_items)
    seen: set[str] = set()
    items: list[msgspec.Raw] = []
    for document in documents:
        for item in _items.decode(document):
            item_id = _item_id.decode(item).id
            if item_id is not None:
                if item_id in seen:
                    continue
                seen.add(item_id)
            items.append(item)
    return items


@get("/v1/responses/{response_id:str}/input_items")
async def list_input_items(
    request: Request[Any, Any, Any], response_store: ResponseStoreDep, response_id: str
) -> InputItemList:
    """The context the response saw: the items of the responses it continued (through
    `previous_response_id`, inputs and outputs) and its own input items, in order."""
    page = page_of(request.query_params)
    chain = await response_store.context(_owner(request), response_id)
    return list_page(context_items(chain), page)
