"""The routes that follow a background response's events (`GET /v1/responses/{id}?
stream=true`, `background: true` with `stream: true`): each holds a connection open,
so each takes one of its owner's follower slots (app.tenancy.followers) before any work,
and its stream gives it back however it ends."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from litestar import Request

from app.routes.event_stream import EventStream
from app.routes.respond import SSE_HEADERS
from app.tenancy.consumes import Consumes
from app.tenancy.followers import FollowedStream, FollowerSlot
from app.tenancy.service import request_key, request_tenancy

FOLLOWER = Consumes("/v1/responses", follower=True)


def follower_slot(request: Request[Any, Any, Any]) -> FollowerSlot:
    """One of the request's owner's follower slots (429 `too_many_followers` past them)."""
    return request_tenancy(request).follow(request_key(request), FOLLOWER)


def followed(events: AsyncIterator[bytes], slot: FollowerSlot) -> EventStream:
    """The events as the response's body, `slot` held until the stream ends."""
    body = FollowedStream(events, slot)
    return EventStream(body, media_type="text/event-stream", headers=SSE_HEADERS)
