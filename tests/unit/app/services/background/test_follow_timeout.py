"""A follower open past its `max_s` (app.services.background.events.follow): every
event stored until then is sent, then one `error` event `follow_timeout` naming the
last one sent to read on from, and the stream ends; without a bound it keeps following."""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator
from typing import Any

from app.services.background.events import EventHub, follow
from app.storage.response_events import EventStore, StoredEvent


class Events:
    """The stored events of one run (a test adds more as it goes)."""

    def __init__(self, count: int) -> None:
        frames = [b'event: e\ndata: {"sequence_number": %d}\n\n' % n for n in range(count)]
        self.rows = [StoredEvent(n, "run", frame) for n, frame in enumerate(frames)]

    async def read(self, response_id: str, from_seq: int, limit: int = 256) -> list[StoredEvent]:
        return [row for row in self.rows if row.seq >= from_seq][:limit]


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 0.1  # each look at the time: a tenth of a second later
        return self.now


async def running() -> str:
    return "in_progress"


def parsed(frame: bytes) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(frame.split(b"data: ", 1)[1])
    return data


async def test_it_sends_what_is_stored_then_ends_with_follow_timeout() -> None:
    events: Any = Events(3)
    store: EventStore = events
    frames = [
        frame
        async for frame in follow(
            store, EventHub(), running, "resp_1", poll_s=0.01, max_s=1.0, clock=Clock()
        )
    ]
    sent, end = frames[:-1], parsed(frames[-1])
    assert b"".join(sent) == b"".join(row.data for row in events.rows)
    assert end["type"] == "error" and end["code"] == "follow_timeout"
    assert end["sequence_number"] == 3
    assert "starting_after=2" in end["message"] and "1 seconds" in end["message"]


async def test_without_a_bound_it_keeps_following() -> None:
    events: Any = Events(1)
    body = follow(events, EventHub(), running, "resp_1", poll_s=0.001, max_s=0, clock=Clock())
    assert isinstance(body, AsyncGenerator)
    assert await anext(body) == events.rows[0].data
    for _ in range(50):  # the response still runs: each new event is sent, no end
        events.rows.append(StoredEvent(len(events.rows), "run", b"x\n\n"))
        assert await anext(body) == b"x\n\n"
    await body.aclose()
