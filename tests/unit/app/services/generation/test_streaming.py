"""SSE framing of a generation: one body per engine output, the closing frames with
[DONE], an error after the first output as one event before [DONE]."""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator

import pytest

from app.services.generation.streaming import open_sse
from app.transport.sse import DONE
from engine.errors import EngineFailure


async def outputs(*items: str, fail: bool = False) -> AsyncGenerator[str, None]:
    for item in items:
        yield item
    if fail:
        raise EngineFailure("boom")


def frames(output: str) -> list[bytes]:
    return [f"data: {c}\n\n".encode() for c in output]  # one frame per character


async def collect(stream: AsyncGenerator[str, None]) -> list[bytes]:
    body = await open_sse(stream, frames, lambda: [b"data: usage\n\n"])
    return [part async for part in body]


async def test_one_body_per_output_and_the_closing_frames_with_done() -> None:
    parts = await collect(outputs("ab", "", "c"))
    assert parts == [b"data: a\n\ndata: b\n\n", b"data: c\n\n", b"data: usage\n\n" + DONE]


async def test_an_error_mid_stream_is_one_event_then_done() -> None:
    parts = await collect(outputs("a", fail=True))
    assert parts[0] == b"data: a\n\n"
    error, done = parts[1].split(b"\n\n", 1)
    assert json.loads(error.removeprefix(b"data: "))["error"]["message"]
    assert done == DONE
    assert len(parts) == 2


async def test_an_error_before_the_first_output_is_raised() -> None:
    with pytest.raises(EngineFailure):
        await collect(outputs(fail=True))
