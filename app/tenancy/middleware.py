"""The ASGI middleware that authenticates every request but the open routes, and
puts OpenAI's x-ratelimit-* headers on every response of a keyed request.

It answers a bad key itself (401 `invalid_api_key`, the OpenAI envelope) without
reaching a handler; the key's record travels to the handlers in the ASGI scope
(`SCOPE_KEY`). /admin/* has its own guard (the admin key).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec

from app.tenancy.auth import InvalidKey, KeyStoreUnavailable

if TYPE_CHECKING:
    from app.tenancy.service import Tenancy

SCOPE_KEY = "lilac.key"
# Probes and metrics answer without a key: load balancers, container and Kubernetes
# probes and Prometheus call them without one, and they hold no tenant's data.
OPEN_PATHS = frozenset({"/health", "/health/live", "/metrics"})

_INVALID = msgspec.json.encode(
    {
        "error": {
            "message": "Incorrect API key provided. Send a valid key as "
            "`Authorization: Bearer <key>`.",
            "type": "invalid_request_error",
            "param": None,
            "code": "invalid_api_key",
        }
    }
)
_UNAVAILABLE = msgspec.json.encode(
    {
        "error": {
            "message": "The key store is unavailable; try again shortly.",
            "type": "service_unavailable",
            "param": None,
            "code": "key_store_unavailable",
        }
    }
)


def _header(scope: dict[str, Any], name: bytes) -> bytes | None:
    for key, value in scope["headers"]:
        if key == name:
            return bytes(value)
    return None


async def _answer(send: Any, status: int, body: bytes, extra: list[Any]) -> None:
    headers = [(b"content-type", b"application/json"), *extra]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class AuthMiddleware:
    def __init__(self, app: Any, tenancy: Tenancy) -> None:
        self.app = app
        self.tenancy = tenancy

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or path in OPEN_PATHS or path.startswith("/admin/"):
            await self.app(scope, receive, send)
            return
        try:
            key = await self.tenancy.auth.authenticate(_header(scope, b"authorization"))
        except InvalidKey:
            await _answer(send, 401, _INVALID, [(b"www-authenticate", b"Bearer")])
            return
        except KeyStoreUnavailable:
            await _answer(send, 503, _UNAVAILABLE, [(b"retry-after", b"1")])
            return
        if key is None:
            await self.app(scope, receive, send)
            return
        scope[SCOPE_KEY] = key
        limiter = self.tenancy.limiter
        if key.limits.rpm is None and key.limits.tpm is None:
            await self.app(scope, receive, send)
            return

        async def send_with_limits(message: Any) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers") or [])
                headers.extend(limiter.headers(key.id, key.limits))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_limits)
