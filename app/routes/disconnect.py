"""Ending a request's work when its client goes away before the response starts.

Once a response streams, the server notices a closed connection when it writes (and
Litestar closes the body iterator, which aborts the engine's requests). Before that (the
request queued, waiting for its first token, or a non-streamed request generating) no
byte is written, so nothing would notice: `until_disconnected` races the work against
the ASGI `http.disconnect` message and cancels the work the moment it arrives, which
closes the engine streams (every sub-request) and withdraws queued tickets.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any, TypeVar

from litestar import Request
from litestar.types import Receive

from app.errors import ClientDisconnected

T = TypeVar("T")


async def disconnected(receive: Receive) -> None:
    """Until the client's `http.disconnect` (read from the ASGI `receive`). The body was
    read in full before: the next message the server sends on this channel is that."""
    while (await receive())["type"] != "http.disconnect":
        pass


async def first_done(*tasks: asyncio.Future[Any]) -> None:
    """Until the first of `tasks` is done: `asyncio.wait(FIRST_COMPLETED)` with one
    future that whichever ends first resolves, none of its sets and bookkeeping (a third
    of a request's race against its client's disconnect)."""
    first = asyncio.get_running_loop().create_future()

    def wake(_: object) -> None:
        if not first.done():
            first.set_result(None)

    for task in tasks:
        task.add_done_callback(wake)
    try:
        await first
    finally:
        for task in tasks:
            task.remove_done_callback(wake)


async def until_disconnected(request: Request, work: Awaitable[T]) -> T:
    """`work`'s result; cancels it and raises ClientDisconnected if the client leaves
    first."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.get_running_loop().create_task(disconnected(request.receive))
    try:
        await first_done(task, watcher)
    except BaseException:
        task.cancel()
        raise
    finally:
        watcher.cancel()
    if task.done():
        try:
            return task.result()
        finally:
            # An error raised here holds this frame in its traceback, and the task holds
            # the error: without this, each failed request (and its body) would live on
            # in a reference cycle until the garbage collector's next pass.
            del task, watcher
    task.cancel()
    try:
        result = await task
    except asyncio.CancelledError:
        pass
    except Exception:  # the client is gone: no one to tell about the work's error
        pass
    else:
        # The work finished before the cancel reached it: end what it opened (a stream).
        close = getattr(result, "aclose", None)
        if close is not None:
            await close()
    raise ClientDisconnected
