"""The request observer tells its activity (the loop-lag sampler) when each HTTP
request starts and ends, whether it completes, fails or its client leaves."""

from __future__ import annotations

from typing import Any

import pytest

from app.observability.middleware import RequestObserver


class Counts:
    def __init__(self) -> None:
        self.in_flight = 0
        self.peak = 0
        self.ended_count = 0

    def started(self) -> None:
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)

    def ended(self) -> None:
        self.in_flight -= 1
        self.ended_count += 1


def _scope() -> dict[str, Any]:
    return {"type": "http", "method": "GET", "path": "/v1/models", "headers": []}


async def _receive() -> dict[str, Any]:
    return {"type": "http.disconnect"}


async def test_a_request_is_in_flight_while_the_app_runs() -> None:
    counts = Counts()
    seen: list[int] = []
    sent: list[dict[str, Any]] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen.append(counts.in_flight)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    observer = RequestObserver(app, ["/v1/models"], lambda *_: None, counts)
    await observer(_scope(), _receive, send)
    assert seen == [1]
    assert counts.in_flight == 0 and counts.ended_count == 1
    assert sent[-1]["body"] == b"{}"


async def test_a_failed_request_ends_too() -> None:
    counts = Counts()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        raise RuntimeError("boom")

    async def send(message: dict[str, Any]) -> None:
        return None

    observer = RequestObserver(app, [], lambda *_: None, counts)
    with pytest.raises(RuntimeError):
        await observer(_scope(), _receive, send)
    assert counts.peak == 1 and counts.in_flight == 0
