"""A minimal in-process ASGI client: one request straight into the app, no sockets, no httpx.

httpx's ASGITransport buffers and adds its own overhead per request; calling the app
directly measures Litestar and our code and little else.
"""

from __future__ import annotations

import asyncio
from typing import Any

Scope = dict[str, Any]
Message = dict[str, Any]


def http_scope(path: str, method: str = "POST") -> Scope:
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": [(b"content-type", b"application/json"), (b"host", b"127.0.0.1")],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
        "state": {},
    }


async def post(
    app: Any, path: str, body: bytes, headers: list[tuple[bytes, bytes]] | None = None
) -> tuple[int, list[bytes]]:
    """POST `body` to `path` (with extra `headers`); the status and every body part the
    app sent."""
    received = False
    done = asyncio.Event()

    async def receive() -> Message:
        nonlocal received
        if received:
            # Streaming responses listen for a disconnect while they send: the client
            # stays until the response is complete, as a real one would.
            await done.wait()
            return {"type": "http.disconnect"}
        received = True
        return {"type": "http.request", "body": body, "more_body": False}

    status = 0
    parts: list[bytes] = []

    async def send(message: Message) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
        elif message["type"] == "http.response.body":
            chunk = message.get("body", b"")
            if chunk:
                parts.append(chunk)
            if not message.get("more_body", False):
                done.set()

    scope = http_scope(path)
    scope["headers"] = scope["headers"] + (headers or [])
    await app(scope, receive, send)
    return status, parts
