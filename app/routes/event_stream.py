"""`EventStream`: a streamed response that closes its body however the response ends.

Litestar iterates a stream's body in a task it cancels when the client leaves, and
never closes the body itself: a body cut off mid-way is left suspended, and one whose
client left before the first body byte (the start sent, then `http.disconnect`) is
never started at all, so nothing inside it runs. A body with `aclose`
(`app.services.generation.streaming.SSEBody`) gets it called once the response is over, sent whole
or not: that ends the request's engine work and settles its usage on every path.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from litestar.response import Stream
from litestar.response.base import ASGIResponse
from litestar.response.streaming import ASGIStreamingResponse
from litestar.types import Receive, Scope, Send

from app.routes.disconnect import disconnected, first_done


class _ClosingStreamingResponse(ASGIStreamingResponse):
    __slots__ = ()

    async def send_body(self, send: Send, receive: Receive) -> None:
        """The body's frames, until they end or the client leaves."""
        loop = asyncio.get_running_loop()
        streaming = loop.create_task(self._stream(send))
        listening = loop.create_task(disconnected(receive))
        try:
            try:
                await first_done(streaming, listening)
            except BaseException:
                streaming.cancel()
                raise
            finally:
                listening.cancel()
            if streaming.done():
                streaming.result()  # the error sending it met, if any
                return
            streaming.cancel()  # the client left, or reading its messages failed
            with contextlib.suppress(asyncio.CancelledError):
                await streaming
            listening.result()  # that failure, if any, as Litestar's group would raise it
        finally:
            # An error raised here holds this frame in its traceback, and each task holds
            # its own error: without the tasks, no cycle keeps them alive.
            del streaming, listening

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            close = getattr(self.iterator, "aclose", None)
            if close is not None:
                await close()


class EventStream(Stream):
    __slots__ = ()

    def to_asgi_response(self, *args: Any, **kwargs: Any) -> ASGIResponse:
        response = super().to_asgi_response(*args, **kwargs)
        # Litestar builds the ASGI response; only its ending differs (no new slots, so
        # the object can take the subclass's behaviour as it is).
        response.__class__ = _ClosingStreamingResponse
        return response
