"""SSE framing of a generation: the rules every streamed endpoint shares.

A stream is opened only after the engine produced its first output, so that
every error of the request is still a plain HTTP error; after that, an error is
one `data: {"error": ...}` event and the stream ends with `data: [DONE]`. What
the chunks say is the endpoint's (`app.services.generation`).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any, Protocol, TypeVar

from app.errors import to_api_error
from app.observability import context
from app.sse import DONE, error_frame

T = TypeVar("T")

Frames = Callable[[T], list[bytes]]  # SSE frames for one engine output (possibly none)
Closing = Callable[[], list[bytes]]  # frames after the last output (the usage chunk)


class RequestEnd(Protocol):
    """Told how a request ended (app.tenancy's usage meter): `finish` is awaited before
    the last frame, `abandon` when nobody is left to wait (the client went away)."""

    generation: Any

    async def finish(self, exc: BaseException | None = None) -> None: ...

    def abandon(self, exc: BaseException) -> None: ...


async def open_sse(
    outputs: AsyncGenerator[T, None],
    frames: Frames[T],
    closing: Closing,
    end: RequestEnd | None = None,
) -> AsyncIterator[bytes]:
    try:
        first = await anext(outputs)
    except StopAsyncIteration:
        first = None
    except BaseException:
        await outputs.aclose()
        raise
    return _frames(first, outputs, frames, closing, end)


async def _frames(
    first: T | None,
    outputs: AsyncGenerator[T, None],
    frames: Frames[T],
    closing: Closing,
    end: RequestEnd | None,
) -> AsyncIterator[bytes]:
    # One body per engine output, and the closing frames with [DONE]: each yield is one
    # ASGI send, one wake-up of the server's I/O thread and one write.
    failure: Exception | None = None
    try:
        if first is not None:
            if data := frames(first):
                yield _joined(data)
            async for output in outputs:
                if data := frames(output):
                    yield _joined(data)
        tail = b"".join(closing())
    except Exception as exc:
        failure = exc
        error = to_api_error(exc)
        record = context.current()
        if record is not None:  # a 200 whose stream ended in an error event
            record.outcome = error.code or error.error_type
        tail = error_frame(error.body())
    except BaseException as exc:  # the client went away (cancelled, or the stream closed)
        if end is not None:
            end.abandon(exc)
        raise
    finally:
        await outputs.aclose()
    if end is not None:  # usage is durable before the client has the last byte
        await end.finish(failure)
    yield tail + DONE


def _joined(data: list[bytes]) -> bytes:
    return data[0] if len(data) == 1 else b"".join(data)
