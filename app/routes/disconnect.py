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
from typing import TypeVar

from litestar import Request

from app.errors import ClientDisconnected

T = TypeVar("T")


async def _disconnect(request: Request) -> None:
    # The body was read in full before the work started: the next message the server
    # sends on this channel is `http.disconnect`.
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


async def until_disconnected(request: Request, work: Awaitable[T]) -> T:
    """`work`'s result; cancels it and raises ClientDisconnected if the client leaves
    first."""
    loop = asyncio.get_running_loop()
    task = asyncio.ensure_future(work)
    watcher = loop.create_task(_disconnect(request))
    # One future that whichever task ends first resolves: what `asyncio.wait` does, with
    # none of its sets and bookkeeping (a third of this race's cost, on every request).
    first = loop.create_future()

    def wake(_: object) -> None:
        if not first.done():
            first.set_result(None)

    task.add_done_callback(wake)
    watcher.add_done_callback(wake)
    try:
        await first
    except BaseException:
        task.cancel()
        raise
    finally:
        watcher.remove_done_callback(wake)
        watcher.cancel()
    if task.done():
        try:
            return task.result()
        finally:
            # An error raised here holds this frame in its traceback, and the task holds
            # the error: without this, each failed request (and its body) would live on
            # in a reference cycle until the garbage collector's next pass.
            del task, watcher, first, wake
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
