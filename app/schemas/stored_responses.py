"""Wire types of the stored-response routes: GET and DELETE /v1/responses/{id} and
GET /v1/responses/{id}/input_items."""

from __future__ import annotations

from typing import Literal

import msgspec
from msgspec import Struct


class ResponseDeleted(Struct):
    id: str
    object: Literal["response"] = "response"
    deleted: bool = True


class InputItemList(Struct):
    """A page of a stored response's input items, as OpenAI lists them."""

    # Each item is returned exactly as stored (a message, function call or output ...).
    data: list[msgspec.Raw]
    first_id: str | None
    last_id: str | None
    has_more: bool
    object: Literal["list"] = "list"


class ItemId(Struct):
    """The one field of an item the listing reads; the rest passes through untouched."""

    id: str | None = None
