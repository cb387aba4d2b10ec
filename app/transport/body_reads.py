"""Bounds on clients that send their request body slowly, or never finish it.

A connection that sent its headers and part of a body holds a socket, a task and its
buffers for as long as the client likes. This ASGI middleware bounds that for every
route that reads a body (JSON bodies, multipart uploads), wherever the body is read:

- a read timeout: while the body has not arrived whole, each wait for its next bytes
  lasts at most `--body-read-timeout-s` seconds; past it the read raises
  `BodyReadTimeout`, which the exception handlers answer as a 408 `request_timeout`
  with `Connection: close` (a body that arrives slowly but keeps coming is not cut);
- a per-client bound: at most `--max-bodies-in-flight-per-client` requests from one
  peer address may be waiting for the rest of their body at once; one more is answered
  429 `too_many_bodies_in_flight` (`Retry-After: 1`, `Connection: close`), the rest of
  its body unread.

A body that arrives whole at once (nearly every request: a burst of 256 small ones
included) is never counted. A request counts from the moment its body is seen arriving
in parts (a first part with more to come) or its first part is `SLOW_START_S` late,
until the body has arrived whole, the client left, the read timed out, or the app
returned. Requests without a body (GET) are not counted and their `receive` is not
wrapped. Each server process keeps its own count (`--api-server-count` over 1: the
bound is per process).
"""

from __future__ import annotations

import asyncio
from typing import Any

from app.errors import BodyReadTimeout, TooManyBodies

# Over HTTP/2 a body need not be announced by either header.
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
_DISCONNECT = {"type": "http.disconnect"}
# A body whose first part comes this much later than its headers counts as in flight.
SLOW_START_S = 1.0


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
    """`receive`, with each wait for the next part of the body bounded in time, and the
    body counted against its client while it arrives in parts. Leaves the count once
    the body is whole, the client left or the wait timed out; after that `receive` is
    the server's own (a streaming response still hears a disconnect)."""

    def __init__(self, receive: Any, timeout_s: float, counts: ClientCounts, client: str) -> None:
        self._receive = receive
        self._timeout_s = timeout_s if timeout_s > 0 else None  # 0: no timeout
        self._counts = counts
        self._client = client
        self._reading = True
        self._counted = False
        self._timed_out = False

    async def __call__(self) -> Any:
        if not self._reading:
            # After a timeout the body is abandoned: a further read finds the client gone.
            return _DISCONNECT if self._timed_out else await self._receive()
        try:
            async with asyncio.timeout(self._timeout_s):
                message = await self._next()
        except TimeoutError:
            self._timed_out = True
            self.finish()
            raise BodyReadTimeout(self._timeout_s or 0) from None
        if message["type"] != "http.request" or not message.get("more_body", False):
            self.finish()
        else:
            self._count()  # more to come: this body is in flight
        return message

    async def _next(self) -> Any:
        """The next message; a first one that is late counts its body in flight from
        then on (a client that sent headers and holds its body back)."""
        if self._counted:
            return await self._receive()
        waiting = asyncio.ensure_future(self._receive())
        try:
            done, _ = await asyncio.wait({waiting}, timeout=SLOW_START_S)
            if not done:
                self._count()
            return await waiting
        finally:
            waiting.cancel()  # only when this read is abandoned (timeout, refusal)

    def _count(self) -> None:
        """Count this body against its client; at the bound, raise `TooManyBodies`."""
        if self._counted:
            return
        if not self._counts.enter(self._client):
            self._reading = False
            raise TooManyBodies(self._counts.limit)
        self._counted = True

    def finish(self) -> None:
        """Stop counting this body; idempotent."""
        if self._reading:
            self._reading = False
            if self._counted:
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
        body = BodyReceive(receive, self.reads.timeout_s, self.reads.counts, client_of(scope))
        try:
            await self.app(scope, body, send)
        finally:
            body.finish()
