"""`until_disconnected`: a client gone before the response ends the work; work that
finished anyway (the cancel came too late) has what it opened closed."""

from __future__ import annotations

import asyncio
import contextlib

import pytest
from litestar import Request

from app.errors import ClientDisconnected
from app.routes.disconnect import until_disconnected


class Body:
    closed = False

    async def aclose(self) -> None:
        self.closed = True


def gone_request() -> Request:
    async def receive() -> dict[str, str]:
        return {"type": "http.disconnect"}

    scope = {"type": "http", "method": "POST", "path": "/", "headers": [], "query_string": b""}
    return Request(scope, receive)  # type: ignore[arg-type]


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
