"""One HTTP request driven straight through an app's ASGI interface, by a client that can
leave at a chosen point, reported the way granian (the server `make serve` runs) reports
it: `receive` returns `http.disconnect` once the client is gone, and whatever the app
sends after that is dropped; or, with `raises`, as ASGI 2.4 servers (uvicorn) do: a send
to a client that left raises OSError. httpx's in-process transport cannot leave: it runs the app
inside the caller's task and reads the body whole.

    result = await asgi_call(app, "/v1/chat/completions", body, headers, Leave(chunks=2))

`Leave()` stays to the end; `Leave(after_s=0.1)` leaves after a delay, whatever has
arrived; `Leave(at_headers=True)` as the response starts (the stream's first token is
out, its body not yet sent: with `raises`, the start itself fails, so the server never
iterates the body); `Leave(chunks=k)` after k body chunks.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

from litestar import Litestar


@dataclass(frozen=True)
class Leave:
    after_s: float | None = None
    at_headers: bool = False
    chunks: int | None = None
    raises: bool = False


class _Gone(OSError):
    """What an ASGI 2.4 server raises from a send to a client that left."""


@dataclass
class CallResult:
    status: int | None = None  # None: the client left before the response started
    chunks: list[bytes] = field(default_factory=list)
    left: bool = False  # the client left before the response ended

    @property
    def body(self) -> bytes:
        return b"".join(self.chunks)


def _scope(path: str, headers: dict[str, str], length: int) -> dict[str, Any]:
    raw = [(k.lower().encode(), v.encode()) for k, v in headers.items()]
    raw += [(b"content-type", b"application/json"), (b"content-length", str(length).encode())]
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"test"), *raw],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
        "state": {},
    }


async def asgi_call(
    app: Litestar,
    path: str,
    body: dict[str, Any] | bytes,
    headers: dict[str, str] | None = None,
    leave: Leave | None = None,
    timeout_s: float = 120.0,
) -> CallResult:
    """Runs the request until the app returns (it must return, client gone or not)."""
    leave = leave or Leave()
    payload = body if isinstance(body, bytes) else json.dumps(body).encode()
    result = CallResult()
    gone = asyncio.Event()  # the client left
    closed = asyncio.Event()  # the connection is over: the client left, or the response ended
    body_sent = False
    ended = False

    def go() -> None:
        if not ended:
            result.left = True
            gone.set()
            closed.set()

    async def receive() -> dict[str, Any]:
        nonlocal body_sent
        if not body_sent:
            body_sent = True
            return {"type": "http.request", "body": payload, "more_body": False}
        await closed.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        nonlocal ended
        if message["type"] == "http.response.start" and leave.at_headers:
            go()
        if gone.is_set():
            if leave.raises:
                raise _Gone
            return  # the socket is closed: the server drops it
        if message["type"] == "http.response.start":
            result.status = message["status"]
        elif message["type"] == "http.response.body":
            if message.get("body"):
                result.chunks.append(message["body"])
            if not message.get("more_body", False):
                ended = True
                closed.set()
            elif leave.chunks is not None and len(result.chunks) >= leave.chunks:
                go()

    async def leave_later(delay_s: float) -> None:
        await asyncio.sleep(delay_s)
        go()

    timer = asyncio.ensure_future(leave_later(leave.after_s)) if leave.after_s is not None else None
    scope = _scope(path, headers or {}, len(payload))
    try:
        await asyncio.wait_for(app(scope, receive, send), timeout_s)  # type: ignore[arg-type]  # a plain dict scope
    except Exception:
        # A server that raised on a send catches what comes of it (Litestar wraps it);
        # anything else is the app's.
        if not (leave.raises and gone.is_set()):
            raise
    finally:
        if timer is not None:
            timer.cancel()
    if not ended and not gone.is_set():
        raise AssertionError("the app returned without ending its response")
    return result
