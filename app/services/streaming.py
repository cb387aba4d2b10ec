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
    ended = end is None
    try:
        if first is not None:
            for data in frames(first):
                yield data
            async for output in outputs:
                for data in frames(output):
                    yield data
        for data in closing():
            yield data
        if end is not None:
            ended = True
            await end.finish()
    except Exception as exc:
        yield error_frame(to_api_error(exc).body())
        if end is not None:
            ended = True
            await end.finish(exc)
    except BaseException as exc:  # the client went away (cancelled, or the stream closed)
        if end is not None and not ended:
            ended = True
            end.abandon(exc)
        raise
    finally:
        await outputs.aclose()
    yield DONE
