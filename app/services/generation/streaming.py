"""SSE framing of a generation: the rules every streamed endpoint shares.

A stream is opened only after the engine produced its first output, so that
every error of the request is still a plain HTTP error; after that, an error is
one `data: {"error": ...}` event and the stream ends with `data: [DONE]`. What
the chunks say is the endpoint's (`app.services.generation.service`).

The body (`SSEBody`) ends its request whatever happens to it: read to the end, cut off
mid-way, or never started at all (the client gone between the first token and the
body: the server then never iterates it). Its `aclose` is what guarantees the last one
(`app.routes.event_stream` calls it once the response is over).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Protocol, TypeVar

from app.errors import APIError, ClientDisconnected
from app.errors.handlers import to_api_error
from app.observability import context
from app.transport.sse import DONE, error_frame
from app.usage_source import UsageSource

T = TypeVar("T")

Frames = Callable[[T], list[bytes]]  # SSE frames for one engine output (possibly none)
Closing = Callable[[], list[bytes]]  # frames after the last output (the usage chunk)
ErrorTail = Callable[[APIError], bytes]  # the frame of an error after the stream began


def openai_error_tail(error: APIError) -> bytes:
    return error_frame(error.body())


class RequestEnd(Protocol):
    """Told how a request ended (app.tenancy's usage meter): `finish` is awaited before
    the last frame, `abandon` when nobody is left to wait (the client went away)."""

    usage_source: UsageSource | None

    @property
    def weight(self) -> float:
        """The request's share of the engine against other clients' (its key's weight)."""
        ...

    def finish(self, exc: BaseException | None = None) -> Awaitable[None]: ...

    def abandon(self, exc: BaseException) -> None: ...


async def open_sse(
    outputs: AsyncGenerator[T, None],
    frames: Frames[T],
    closing: Closing,
    end: RequestEnd | None = None,
    error_tail: ErrorTail = openai_error_tail,
    done: bytes = DONE,
) -> SSEBody:
    """`error_tail` and `done` are the API's own: OpenAI's error event and `[DONE]` by
    default (Anthropic's stream has its `error` event and no end marker)."""
    try:
        first = await anext(outputs)
    except StopAsyncIteration:
        first = None
    except BaseException:
        await outputs.aclose()
        raise
    body = _frames(first, outputs, frames, closing, end, error_tail, done)
    return SSEBody(body, outputs, end)


class SSEBody:
    """An opened stream's body: its frames, and `aclose`, which ends the request once
    (aborting what the engine still runs, settling `end`) even if the frames were never
    iterated; after a started body, it only closes the frames (they end the request)."""

    __slots__ = ("_body", "_end", "_outputs", "_started")

    def __init__(
        self,
        body: AsyncGenerator[bytes, None],
        outputs: AsyncGenerator[object, None],
        end: RequestEnd | None,
    ) -> None:
        self._body = body
        self._outputs = outputs
        self._end = end
        self._started = False

    def __aiter__(self) -> SSEBody:
        return self

    async def __anext__(self) -> bytes:
        self._started = True
        return await anext(self._body)

    async def aclose(self) -> None:
        if self._started:
            await self._body.aclose()
            return
        self._started = True  # a second aclose finds nothing left to end
        await _ended(self._outputs, self._end, ClientDisconnected())


async def _frames(
    first: T | None,
    outputs: AsyncGenerator[T, None],
    frames: Frames[T],
    closing: Closing,
    end: RequestEnd | None,
    error_tail: ErrorTail,
    done: bytes,
) -> AsyncGenerator[bytes, None]:
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
        tail = error_tail(error)
    except BaseException as exc:  # the client went away (cancelled, or the stream closed)
        await _ended(outputs, end, exc)
        raise
    finally:
        await outputs.aclose()
    if end is not None:  # usage is durable before the client has the last byte
        await end.finish(failure)
    yield tail + done


async def _ended(
    outputs: AsyncGenerator[object, None], end: RequestEnd | None, exc: BaseException
) -> None:
    """The client went away: close the engine's stream first (it counts, as it closes,
    what the engine produced that nobody read), then settle `end`, even if the close is
    interrupted."""
    try:
        await outputs.aclose()
    finally:
        if end is not None:
            end.abandon(exc)


def _joined(data: list[bytes]) -> bytes:
    return data[0] if len(data) == 1 else b"".join(data)
