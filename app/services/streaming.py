"""SSE streaming shared by the generation endpoints.

A stream is opened only after the engine produced its first output, so that
every error of the request is still a plain HTTP error; after that, an error is
one `data: {"error": ...}` event and the stream ends with `data: [DONE]`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Protocol, TypeVar

from app.errors import to_api_error
from app.sse import DONE, error_frame

T = TypeVar("T")


class FrameWriter(Protocol[T]):  # type: ignore[misc]
    def frames(self, output: T) -> list[bytes]:
        """SSE frames for one engine output (possibly none)."""

    def closing_frames(self) -> list[bytes]:
        """Frames after the last output (the usage chunk)."""


async def open_sse(outputs: AsyncIterator[T], writer: FrameWriter[T]) -> AsyncIterator[bytes]:
    try:
        first = await anext(outputs)
    except StopAsyncIteration:
        first = None
    except BaseException:
        await outputs.aclose()  # type: ignore[attr-defined]
        raise
    return _frames(first, outputs, writer)


async def _frames(
    first: T | None, outputs: AsyncIterator[T], writer: FrameWriter[T]
) -> AsyncIterator[bytes]:
    try:
        if first is not None:
            for frame in writer.frames(first):
                yield frame
            async for output in outputs:
                for frame in writer.frames(output):
                    yield frame
        for frame in writer.closing_frames():
            yield frame
    except Exception as exc:
        yield error_frame(to_api_error(exc).body())
    finally:
        await outputs.aclose()  # type: ignore[attr-defined]
    yield DONE
