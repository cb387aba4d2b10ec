"""Reference cycles a request leaves: the ASGI exchange the tests drive an app with
(a client that may leave mid-way), and what the garbage collector finds after it.

The server collects the young generation rarely (app.launch.collector): a request that left a
reference cycle would keep its objects, its body among them, alive until the next
collection, hundreds of requests later."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from litestar import Litestar

from perf.micro.asgi import http_scope

Message = dict[str, Any]
# Modules whose objects only a request makes (the engine's and vLLM's included).
REQUEST_MODULES = ("app.", "engine.", "litestar", "vllm")


class Exchange:
    """One request straight into the ASGI app; `leave_after` body parts (0: before any
    byte, once 20 ms have passed), the client is gone: `receive` says so and later
    sends go nowhere, as an ASGI server does."""

    def __init__(self, body: bytes, leave_after: int | None = None) -> None:
        self.body = body
        self.leave_after = leave_after
        self.status = 0
        self.parts: list[bytes] = []
        self._read = False
        self._gone = asyncio.Event()
        self.finished = asyncio.Event()

    async def receive(self) -> Message:
        if not self._read:
            self._read = True
            return {"type": "http.request", "body": self.body, "more_body": False}
        if self.leave_after == 0:
            await asyncio.sleep(0.02)
            self._gone.set()
        await _first(self._gone, self.finished)
        return {"type": "http.disconnect"}

    async def send(self, message: Message) -> None:
        if self._gone.is_set():
            return
        if message["type"] == "http.response.start":
            self.status = message["status"]
        elif message["type"] == "http.response.body":
            self.parts.append(message.get("body", b""))
            if not message.get("more_body", False):
                self.finished.set()
            if self.leave_after and len(self.parts) >= self.leave_after:
                self._gone.set()


async def _first(*events: asyncio.Event) -> None:
    waits = [asyncio.ensure_future(event.wait()) for event in events]
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for wait in waits:
            wait.cancel()


async def call(app: Litestar, path: str, exchange: Exchange, authorization: str | None) -> None:
    scope = http_scope(path)
    if authorization is not None:
        scope["headers"] = [*scope["headers"], (b"authorization", authorization.encode())]
    await app(scope, exchange.receive, exchange.send)  # type: ignore[arg-type]  # a plain ASGI scope


def of_the_request_path(thing: object) -> bool:
    """Garbage a request made: its frames, errors and the app's, the engine's or
    Litestar's objects (not the SQLAlchemy statements that the background writes
    compile now and then)."""
    if isinstance(thing, BaseException) or type(thing).__name__ in ("frame", "coroutine"):
        return True
    return type(thing).__module__.startswith(REQUEST_MODULES)


async def garbage_of(run: Callable[[], Awaitable[None]], times: int = 5) -> list[str]:
    """What `times` runs of `run` left in reference cycles, described."""
    await run()  # first calls build caches (compiled templates, schemas)
    await asyncio.sleep(0.05)
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        for _ in range(times):
            await run()
        await asyncio.sleep(0.1)  # the engine's and the writer's side of the request
        gc.collect()
        found = [thing for thing in gc.garbage if of_the_request_path(thing)]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    return sorted({_describe(thing) for thing in found})


def _describe(thing: Any) -> str:
    if type(thing).__name__ == "frame":
        return f"frame of {thing.f_code.co_name} ({Path(thing.f_code.co_filename).name})"
    return type(thing).__qualname__
