"""The ASGI middleware that authenticates every request but the open routes, and
puts OpenAI's x-ratelimit-* headers on every response of a keyed request.

It answers a bad key itself (401 `invalid_api_key`, the OpenAI envelope) without
reaching a handler; the key's record travels to the handlers in the ASGI scope
(`SCOPE_KEY`). /admin/* has its own guard (the admin key).
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TYPE_CHECKING

from litestar.types import ASGIApp, HTTPResponseStartEvent, Message, Receive, Scope, Send

from app.errors import InvalidKey, KeyStoreUnavailable
from app.errors.handlers import send_error
from app.tenancy.scope import SCOPE_KEY, SCOPE_LIMIT_HEADERS, SCOPE_TENANCY

if TYPE_CHECKING:
    from app.tenancy.service import Tenancy

# Probes and metrics answer without a key: load balancers, container and Kubernetes
# probes and Prometheus call them without one, and they hold no tenant's data.
OPEN_PATHS = frozenset({"/health", "/health/live", "/metrics"})


def _header(scope: Scope, name: bytes) -> bytes | None:
    for key, value in scope["headers"]:
        if key == name:
            return bytes(value)
    return None


def credentials(scope: Scope) -> bytes | None:
    """The `Authorization` header, else an `x-api-key` (how Anthropic's SDKs send the
    key) as if it were `Bearer <key>`."""
    authorization = _header(scope, b"authorization")
    if authorization is not None:
        return authorization
    api_key = _header(scope, b"x-api-key")
    return b"Bearer " + api_key if api_key is not None else None


class AuthMiddleware:
    def __init__(self, app: ASGIApp, tenancy: Tenancy) -> None:
        self.app = app
        self.tenancy = tenancy

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        scope[SCOPE_TENANCY] = self.tenancy  # type: ignore[literal-required]  # ASGI scope is a TypedDict
        path = scope.get("path", "")
        if scope["type"] != "http" or path in OPEN_PATHS or path.startswith("/admin/"):
            await self.app(scope, receive, send)
            return
        try:
            key = await self.tenancy.auth.authenticate(credentials(scope))
        except (InvalidKey, KeyStoreUnavailable) as error:
            await send_error(send, path, error)
            return
        if key is None:
            await self.app(scope, receive, send)
            return
        scope[SCOPE_KEY] = key  # type: ignore[literal-required]
        limiter = self.tenancy.limiter
        if key.limits.rpm is None and key.limits.tpm is None:
            await self.app(scope, receive, send)
            return

        # A plain function returning `send`'s awaitable, not a coroutine of its own: it
        # runs on every send, a streamed response's every frame.
        def send_with_limits(message: Message) -> Awaitable[None]:
            if message["type"] == "http.response.start":
                headers = message.get("headers")
                # The admission's headers (app.routes.respond), unknown to the scope's TypedDict.
                admitted = scope.get(SCOPE_LIMIT_HEADERS)
                extra: list[tuple[bytes, bytes]] = admitted or limiter.headers(key.id, key.limits)  # type: ignore[assignment]
                if type(headers) is list:  # the response's own list, made for this send
                    headers.extend(extra)
                else:
                    started: HTTPResponseStartEvent = {
                        **message,
                        "headers": [*(headers or ()), *extra],
                    }
                    message = started
            return send(message)

        await self.app(scope, receive, send_with_limits)
