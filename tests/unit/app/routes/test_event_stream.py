"""A streamed response: every frame and the end of the body when the body ends, without
waiting for the client to say it left; when the client leaves, or reading its messages
fails, or sending fails, the frames stop there; the body is closed whichever way it
ends, and the response's task is never left waiting."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from app.routes.event_stream import _ClosingStreamingResponse

Message = dict[str, Any]
SCOPE = {"type": "http", "method": "GET", "path": "/", "headers": []}


class Body:
    """An SSE body of `frames` frames, `pause_s` apart, that notes its `aclose`."""

    def __init__(self, frames: int, pause_s: float = 0.0) -> None:
        self.frames = frames
        self.pause_s = pause_s
        self.closed = False

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._frames()

    async def _frames(self) -> AsyncIterator[bytes]:
        for number in range(self.frames):
            await asyncio.sleep(self.pause_s)
            yield b"data: %d\n\n" % number

    async def aclose(self) -> None:
        self.closed = True


def response(body: Body) -> _ClosingStreamingResponse:
    return _ClosingStreamingResponse(iterator=body, media_type="text/event-stream")


class Client:
    def __init__(self) -> None:
        self.sent: list[Message] = []
        self.gone = asyncio.Event()

    async def receive(self) -> Message:
        await self.gone.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: Message) -> None:
        self.sent.append(message)

    def bodies(self) -> list[bytes]:
        return [m["body"] for m in self.sent if m["type"] == "http.response.body"]


async def test_a_whole_stream_ends_without_waiting_for_the_client() -> None:
    body, client = Body(3), Client()
    async with asyncio.timeout(5):  # the client never says it left
        await response(body)(SCOPE, client.receive, client.send)  # type: ignore[arg-type]
    assert client.sent[0]["type"] == "http.response.start"
    assert client.bodies() == [b"data: 0\n\n", b"data: 1\n\n", b"data: 2\n\n", b""]
    assert client.sent[-1]["more_body"] is False
    assert body.closed


async def test_a_client_that_leaves_stops_the_frames() -> None:
    body, client = Body(1000, pause_s=0.001), Client()

    async def leave_after_three() -> None:
        while len(client.bodies()) < 3:
            await asyncio.sleep(0.001)
        client.gone.set()

    leaving = asyncio.ensure_future(leave_after_three())
    async with asyncio.timeout(5):
        await response(body)(SCOPE, client.receive, client.send)  # type: ignore[arg-type]
    await leaving
    sent = len(client.bodies())
    assert 3 <= sent < 10
    assert b"" not in client.bodies()  # no end of body: the stream was cut off
    assert body.closed
    await asyncio.sleep(0.05)
    assert len(client.bodies()) == sent  # nothing runs on after the response returned


async def test_a_failure_to_read_the_clients_messages_is_raised() -> None:
    body, client = Body(1000, pause_s=0.001), Client()

    async def broken_receive() -> Message:
        await asyncio.sleep(0.01)
        raise OSError("the connection broke")

    with pytest.raises(OSError, match="the connection broke"):
        async with asyncio.timeout(5):
            await response(body)(SCOPE, broken_receive, client.send)  # type: ignore[arg-type]
    assert body.closed
    assert len(client.bodies()) < 1000


async def test_a_failure_to_send_is_raised() -> None:
    body, client = Body(10), Client()

    async def failing_send(message: Message) -> None:
        if message["type"] == "http.response.body":
            raise OSError("the client is gone")
        await client.send(message)

    with pytest.raises(OSError, match="the client is gone"):
        async with asyncio.timeout(5):
            await response(body)(SCOPE, client.receive, failing_send)  # type: ignore[arg-type]
    assert body.closed


async def test_a_cancelled_response_cancels_its_frames() -> None:
    body, client = Body(1000, pause_s=0.001), Client()
    task = asyncio.ensure_future(response(body)(SCOPE, client.receive, client.send))  # type: ignore[arg-type]
    await asyncio.sleep(0.02)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    sent = len(client.bodies())
    await asyncio.sleep(0.05)
    assert len(client.bodies()) == sent
    assert body.closed
