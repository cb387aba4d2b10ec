"""The ASGI layer around the whole app (outside routing and the exception handlers, so
404s and errors pass through it too): per HTTP request it opens the `RequestRecord`,
returns `X-Request-Id` on the response (and `request-id` on Anthropic's routes), and
once the last byte is sent counts the request in the HTTP metrics and writes the access
line.

It only watches `send`: one dictionary lookup per message on the streaming path.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection
from typing import Any, Protocol, cast

from litestar.types import ASGIApp, Receive, Scope, Send

from app.errors.anthropic import is_anthropic_path
from app.observability.context import (
    HEADER,
    RequestRecord,
    accept_request_id,
    close_record,
    open_record,
)
from app.observability.logs import access_line

_HEADER_BYTES = HEADER.encode()
_ANTHROPIC_HEADER = b"request-id"
# Polled by load balancers and Prometheus every few seconds: counted, not logged.
QUIET_PATHS = frozenset({"/health", "/health/live", "/metrics"})


class Activity(Protocol):
    """Told when each HTTP request starts and ends (the loop-lag sampler, which samples
    finely only while requests are in flight)."""

    def started(self) -> None: ...

    def ended(self) -> None: ...


class _Nobody:
    def started(self) -> None:
        return None

    def ended(self) -> None:
        return None


class RequestObserver:
    def __init__(
        self,
        app: ASGIApp,
        routes: Collection[str],
        observe_http: Callable[[str, str, int, float], None],
        activity: Activity | None = None,
    ) -> None:
        self._app = app
        self._routes = frozenset(routes)
        self._observe_http = observe_http
        self._activity = activity or _Nobody()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        http = cast(dict[str, Any], scope)
        request_id, supplied = accept_request_id(_header(http, _HEADER_BYTES))
        record = RequestRecord(request_id, supplied, http["method"], http["path"])
        id_headers = _id_headers(request_id, http["path"])
        finished = False

        async def send_observed(message: Any) -> None:
            nonlocal finished
            kind = message["type"]
            if kind == "http.response.start":
                record.status = message["status"]
                message["headers"] = [*message.get("headers", ()), *id_headers]
            elif kind == "http.response.body" and not message.get("more_body", False):
                await send(message)
                finished = True
                self._finish(record)
                return
            await send(message)

        token = open_record(record)
        activity = self._activity
        activity.started()
        try:
            await self._app(scope, receive, send_observed)
        finally:
            activity.ended()
            if not finished:  # the client went away, or nothing was sent
                record.outcome = record.outcome or "client_disconnected"
                record.status = record.status or 499  # nginx's "client closed request"
                self._finish(record)
            close_record(token)

    def _finish(self, record: RequestRecord) -> None:
        duration = time.monotonic() - record.started
        route = record.path if record.path in self._routes else "other"
        self._observe_http(route, record.method, record.status, duration)
        if record.path not in QUIET_PATHS:
            access_line(record, duration)


def _id_headers(request_id: str, path: str) -> tuple[tuple[bytes, bytes], ...]:
    """`X-Request-Id`, and on Anthropic's routes its `request-id` too (what the Anthropic
    SDKs read as a response's `_request_id`)."""
    value = request_id.encode()
    if is_anthropic_path(path):
        return (_HEADER_BYTES, value), (_ANTHROPIC_HEADER, value)
    return ((_HEADER_BYTES, value),)


def _header(scope: dict[str, Any], name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key == name:
            try:
                return str(value.decode("latin-1"))
            except UnicodeDecodeError:
                return None
    return None
