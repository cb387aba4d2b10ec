"""Bounds on clients that send their request body slowly, or never finish it.

A connection that sent its headers and part of a body holds a socket, a task and its
buffers for as long as the client likes. This ASGI middleware bounds that for every
route that reads a body (JSON bodies, multipart uploads), wherever the body is read:

- a read timeout: while the body has not arrived whole, each wait for its next bytes
  lasts at most `--body-read-timeout-s` seconds; past it the read raises
  `BodyReadTimeout`, which the exception handlers answer as a 408 `request_timeout`
  with `Connection: close` (a body that arrives slowly but keeps coming is not cut);
- a per-client bound: at most `--max-bodies-in-flight-per-client` requests from one
  peer address may be reading their body at once; one more is answered 429
  `too_many_bodies_in_flight` (`Retry-After: 1`, `Connection: close`) before the app
  runs, without reading its body.

A request counts from when it reaches the middleware until its body has arrived whole,
the client left, the read timed out, or the app returned without reading it. Requests
without a body (GET) are not counted and their `receive` is not wrapped. Each server
process keeps its own count (`--api-server-count` over 1: the bound is per process).
"""

from __future__ import annotations

import asyncio
from typing import Any

from app.errors import BodyReadTimeout, TooManyBodies
from app.errors.handlers import send_error
from app.observability import context

# Over HTTP/2 a body need not be announced by either header.
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
_DISCONNECT = {"type": "http.disconnect"}


def expects_body(scope: dict[str, Any]) -> bool:
    """Whether the request announces a body (a length over 0, or chunked)."""
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            return value.strip().lstrip(b"0") != b""
        if name == b"transfer-encoding":
            return True
    return scope.get("http_version") == "2" and scope.get("method") in _BODY_METHODS


def client_of(scope: dict[str, Any]) -> str:
    """The peer address a request's body counts against ("" when the server gives none)."""
    client = scope.get("client")
    return str(client[0]) if client else ""


class ClientCounts:
    """Bodies in flight per client address; an address at zero is forgotten, so the
    table holds only clients sending bodies now."""

    def __init__(self, limit: int) -> None:
        self.limit = limit  # 0: no bound
        self._counts: dict[str, int] = {}

    def enter(self, client: str) -> bool:
        """Count one more body from `client`; False (and nothing counted) at the bound."""
        count = self._counts.get(client, 0)
        if self.limit > 0 and count >= self.limit:
            return False
        self._counts[client] = count + 1
        return True

    def leave(self, client: str) -> None:
        count = self._counts[client] - 1
        if count:
            self._counts[client] = count
        else:
            del self._counts[client]

    def of(self, client: str) -> int:
        return self._counts.get(client, 0)

    def total(self) -> int:
        return sum(self._counts.values())


class BodyReceive:
    """`receive`, with each wait for the next part of the body bounded in time. Leaves
    the count once the body is whole, the client left or the wait timed out; after that
    `receive` is the server's own (a streaming response still hears a disconnect)."""

    def __init__(self, receive: Any, timeout_s: float, counts: ClientCounts, client: str) -> None:
        self._receive = receive
        self._timeout_s = timeout_s if timeout_s > 0 else None  # 0: no timeout
        self._counts = counts
        self._client = client
        self._reading = True
        self._timed_out = False

    async def __call__(self) -> Any:
        if not self._reading:
            # After a timeout the body is abandoned: a further read finds the client gone.
            return _DISCONNECT if self._timed_out else await self._receive()
        try:
            async with asyncio.timeout(self._timeout_s):
                message = await self._receive()
        except TimeoutError:
            self._timed_out = True
            self.finish()
            raise BodyReadTimeout(self._timeout_s or 0) from None
        if message["type"] != "http.request" or not message.get("more_body", False):
            self.finish()
        return message

    def finish(self) -> None:
        """Stop counting this body; idempotent."""
        if self._reading:
            self._reading = False
            self._counts.leave(self._client)


class BodyReads:
    """The bounds and the counts, shared by every route's `BodyReadGuard` (Litestar
    builds the middleware once per route)."""

    def __init__(self, timeout_s: float, per_client: int) -> None:
        self.timeout_s = timeout_s
        self.counts = ClientCounts(per_client)


class BodyReadGuard:
    """ASGI middleware: the read timeout and the per-client bound on bodies in flight."""

    def __init__(self, app: Any, reads: BodyReads) -> None:
        self.app = app
        self.reads = reads

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not expects_body(scope):
            await self.app(scope, receive, send)
            return
        counts = self.reads.counts
        client = client_of(scope)
        if not counts.enter(client):
            await _refuse(scope, send, counts.limit)
            return
        body = BodyReceive(receive, self.reads.timeout_s, counts, client)
        try:
            await self.app(scope, body, send)
        finally:
            body.finish()


async def _refuse(scope: Any, send: Any, limit: int) -> None:
    error = TooManyBodies(limit)
    record = context.current()
    if record is not None:  # the access line's outcome
        record.outcome = error.code
    await send_error(send, scope.get("path", ""), error)
