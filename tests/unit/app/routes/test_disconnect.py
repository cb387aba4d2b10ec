"""`until_disconnected`: a client gone before the response ends the work; work that
finished anyway (the cancel came too late) has what it opened closed."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

import pytest
from litestar import Request

from app.errors import ClientDisconnected
from app.routes.disconnect import first_done, until_disconnected


class Body:
    closed = False

    async def aclose(self) -> None:
        self.closed = True


def request_of(receive: Callable[[], Awaitable[dict[str, str]]]) -> Request:
    scope = {"type": "http", "method": "POST", "path": "/", "headers": [], "query_string": b""}
    return Request(scope, receive)  # type: ignore[arg-type]


def gone_request() -> Request:
    async def receive() -> dict[str, str]:
        return {"type": "http.disconnect"}

    return request_of(receive)


async def test_work_that_outlives_the_cancel_has_its_stream_closed() -> None:
    body = Body()

    async def work() -> Body:
        # Swallows its cancel, as a wait granted in the same instant once did.
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(10)
        return body

    with pytest.raises(ClientDisconnected):
        await until_disconnected(gone_request(), work())
    assert body.closed


async def test_cancelled_work_is_not_awaited_further() -> None:
    started = asyncio.Event()

    async def work() -> Body:
        started.set()
        await asyncio.sleep(10)
        return Body()

    with pytest.raises(ClientDisconnected):
        await until_disconnected(gone_request(), work())
    assert started.is_set()


def staying_request() -> tuple[Request, asyncio.Event]:
    """A request whose client stays until `leave` is set."""
    leave = asyncio.Event()

    async def receive() -> dict[str, str]:
        await leave.wait()
        return {"type": "http.disconnect"}

    return request_of(receive), leave


async def long_work(ended: list[str]) -> int:
    """Ten seconds of work that notes its cancellation in `ended`."""
    try:
        await asyncio.sleep(10)
    except asyncio.CancelledError:
        ended.append("cancelled")
        raise
    return 1


async def test_the_works_result_and_error_come_back_while_the_client_stays() -> None:
    request, _ = staying_request()

    async def answer() -> int:
        await asyncio.sleep(0)
        return 42

    async def fail() -> int:
        await asyncio.sleep(0)
        raise ValueError("bad request")

    assert await until_disconnected(request, answer()) == 42
    with pytest.raises(ValueError, match="bad request"):
        await until_disconnected(request, fail())
    await asyncio.sleep(0)
    watchers = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    assert watchers == []  # each race's disconnect watcher is gone with it


async def test_a_client_that_leaves_mid_work_cancels_it() -> None:
    request, leave = staying_request()
    ended: list[str] = []

    asyncio.get_running_loop().call_later(0.01, leave.set)
    with pytest.raises(ClientDisconnected):
        await until_disconnected(request, long_work(ended))
    assert ended == ["cancelled"]


async def test_cancelling_the_race_cancels_the_work() -> None:
    request, _ = staying_request()
    ended: list[str] = []

    race = asyncio.ensure_future(until_disconnected(request, long_work(ended)))
    await asyncio.sleep(0.01)
    race.cancel()
    with pytest.raises(asyncio.CancelledError):
        await race
    await asyncio.sleep(0)
    assert ended == ["cancelled"]
    assert [t for t in asyncio.all_tasks() if t is not asyncio.current_task()] == []


async def test_first_done_returns_at_the_first_and_touches_none() -> None:
    quick = asyncio.ensure_future(asyncio.sleep(0.01, result="quick"))
    slow = asyncio.ensure_future(asyncio.sleep(10))
    await first_done(quick, slow)
    assert quick.result() == "quick"
    assert not slow.done()  # the others run on: ending them is the caller's to do
    waiting = asyncio.ensure_future(first_done(slow))
    await asyncio.sleep(0)
    waiting.cancel()  # a cancelled wait leaves the task it waited on running
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert not slow.done()
    slow.cancel()
