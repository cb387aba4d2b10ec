"""The auth middleware's rate-limit headers, on whatever shape of headers a response
starts with: the response's own list (extended where it is) or any other sequence."""

from __future__ import annotations

from typing import Any

from app.tenancy.keys.auth import Authenticator
from app.tenancy.keys.store import KeyLimits, KeyRecord
from app.tenancy.middleware import AuthMiddleware
from app.tenancy.scope import SCOPE_KEY
from app.tenancy.service import Tenancy

KEY = KeyRecord(id="k1", name="k1", created_at=0.0, limits=KeyLimits(rpm=60, tpm=None))


class OneKey(Authenticator):
    mode = "keys"

    async def authenticate(self, header: bytes | None) -> KeyRecord | None:
        return KEY


def app_sending(headers: Any) -> Any:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        assert scope[SCOPE_KEY] is KEY
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b"{}"})

    return app


async def sent_headers(headers: Any) -> list[tuple[bytes, bytes]]:
    middleware = AuthMiddleware(app_sending(headers), Tenancy(OneKey()))
    messages: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        messages.append(message)

    scope = {"type": "http", "path": "/v1/chat/completions", "headers": []}
    await middleware(scope, None, send)
    assert [m["type"] for m in messages] == ["http.response.start", "http.response.body"]
    return list(messages[0]["headers"])


async def test_the_limits_join_the_responses_headers_whatever_their_shape() -> None:
    own = (b"content-type", b"application/json")
    for headers in ([own], (own,), None):
        sent = await sent_headers(headers)
        names = [name for name, _ in sent]
        assert names[0] == b"content-type" or headers is None
        assert names[-3:] == [
            b"x-ratelimit-limit-requests",
            b"x-ratelimit-remaining-requests",
            b"x-ratelimit-reset-requests",
        ]
        assert dict(sent)[b"x-ratelimit-limit-requests"] == b"60"
