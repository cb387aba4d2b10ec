"""GET and DELETE /v1/responses/{id}, GET /v1/responses/{id}/input_items: a key's own
stored responses. Another key's response, an expired one and an unknown id are the same
404 `response_not_found`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec
from litestar import MediaType, Request, Response, delete, get

from app.errors import InvalidRequest
from app.routes.deps import ResponseStoreDep
from app.schemas.stored_responses import InputItemList, ItemId, ResponseDeleted
from app.storage.database import owner_of
from app.tenancy.service import request_key

MAX_PAGE = 100
DEFAULT_PAGE = 20
_items = msgspec.json.Decoder(list[msgspec.Raw])
_item_id = msgspec.json.Decoder(ItemId)
_TRUE = {"true", "1"}


def _owner(request: Request[Any, Any, Any]) -> str:
    return owner_of(request_key(request))


@get("/v1/responses/{response_id:str}")
async def retrieve_response(
    request: Request[Any, Any, Any], response_store: ResponseStoreDep, response_id: str
) -> Response[bytes]:
    """The stored Response object, as it was returned when made."""
    if request.query_params.get("stream", "false").lower() in _TRUE:
        raise InvalidRequest(
            "`stream=true` replays the events of a background response; this server "
            "stores finished responses only, so retrieve it without `stream`.",
            param="stream",
            code="unsupported_parameter",
        )
    stored = await response_store.get(_owner(request), response_id)
    return Response(stored.response, media_type=MediaType.JSON)


@delete("/v1/responses/{response_id:str}", status_code=200)
async def delete_response(
    request: Request[Any, Any, Any], response_store: ResponseStoreDep, response_id: str
) -> ResponseDeleted:
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


@get("/v1/responses/{response_id:str}/input_items")
async def list_input_items(
    request: Request[Any, Any, Any], response_store: ResponseStoreDep, response_id: str
) -> InputItemList:
    """The input items of the request that made a stored response."""
    page = page_of(request.query_params)
    stored = await response_store.get(_owner(request), response_id)
    return list_page(_items.decode(stored.input_items), page)
