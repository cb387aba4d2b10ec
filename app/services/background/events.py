"""The events of a background response: recorded as its run streams them, and read
again (replayed, then followed live) by `GET /v1/responses/{id}?stream=true`.

A run's events are the stream `ResponsesService` makes for a streamed request, frame
for frame, numbered by their `sequence_number` (0, 1, 2, ... in order). They are written
a batch at a time (`EventRecorder.flush`: at most every `FLUSH_S`, never one commit per
token), within the stored-response byte bound. A follower reads what is stored after the
number it has, then waits for the next batch (woken at once on this replica, polling
for runs on another), and ends once the response is final and every event is sent. A
run cut before its end is discarded and the next run starts again from 0: a follower
that had read the cut run's events gets an `error` event (`response_restarted`) and its
stream ends; reading again from the start gives the new run's events. A follower open
for `--max-follow-s` ends with an `error` event (`follow_timeout`) naming the last event
it sent, to read on from with `starting_after`: the response itself goes on."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable

import msgspec

from app.schemas.responses_output import ErrorEvent
from app.services.responses.wire import event_frame
from app.storage.response_events import EventStore, StoredEvent
from app.tasks import wait_event

FLUSH_S = 0.25  # the longest a recorded event waits to be written
FLUSH_EVENTS = 256  # or this many events, whichever comes first
POLL_S = 0.5  # a follower's look at the database when nothing woke it
READ_PAGE = 256
FINAL_STATUSES = frozenset({"completed", "incomplete", "failed", "cancelled"})
RESTARTED = "response_restarted"
FOLLOW_TIMEOUT = "follow_timeout"


class _Data(msgspec.Struct):
    response: dict[str, object] | None = None


_data = msgspec.json.Decoder(_Data)


def split_frames(chunk: bytes) -> list[bytes]:
    """The SSE frames of one chunk of the stream (each ends in a blank line; the JSON
    inside holds no raw newline)."""
    return [part + b"\n\n" for part in chunk.split(b"\n\n") if part.strip()]


def frame_response(frame: bytes) -> bytes | None:
    """The Response object a lifecycle event carries (`response.completed`, ...), as JSON."""
    _, _, data = frame.partition(b"\ndata: ")
    if not data:
        return None
    try:
        response = _data.decode(data.strip()).response
    except msgspec.DecodeError:
        return None
    return msgspec.json.encode(response) if response is not None else None


class EventHub:
    """Wakes this replica's followers of a response when a batch of its events is in."""

    def __init__(self) -> None:
        self._events: dict[str, asyncio.Event] = {}

    def changed(self, response_id: str) -> None:
        event = self._events.pop(response_id, None)
        if event is not None:
            event.set()

    async def wait(self, response_id: str, timeout_s: float) -> None:
        event = self._events.setdefault(response_id, asyncio.Event())
        await wait_event(event, timeout_s)


class OverBound(Exception):
    """The run's events would take more than the stored-response byte bound."""


class EventRecorder:
    """One run's events, written in batches under that run's own `attempt` name."""

    def __init__(
        self,
        events: EventStore,
        hub: EventHub,
        response_id: str,
        max_bytes: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.events = events
        self.hub = hub
        self.response_id = response_id
        self.max_bytes = max_bytes
        self.attempt = uuid.uuid4().hex
        self.size = 0
        self.count = 0
        self.last: bytes | None = None  # the last event recorded
        self._pending: list[StoredEvent] = []
        self._clock = clock
        self._flushed_at = clock()

    def add(self, chunk: bytes) -> None:
        """The frames of one chunk of the stream; `OverBound` (nothing added) when they
        would take the run over its bound."""
        frames = split_frames(chunk)
        size = sum(len(frame) for frame in frames)
        if self.size + size > self.max_bytes:
            raise OverBound()
        self.size += size
        for frame in frames:
            self._pending.append(StoredEvent(self.count, self.attempt, frame))
            self.count += 1
            self.last = frame

    def add_final(self, frame: bytes) -> None:
        """A closing event the server adds (a failure's), past the bound if need be: it
        is small and a follower needs an end."""
        self._pending.append(StoredEvent(self.count, self.attempt, frame))
        self.count += 1
        self.last = frame

    def due(self) -> bool:
        return bool(self._pending) and (
            len(self._pending) >= FLUSH_EVENTS or self._clock() - self._flushed_at >= FLUSH_S
        )

    async def flush(self) -> None:
        pending, self._pending = self._pending, []
        self._flushed_at = self._clock()
        if pending:
            await self.events.append(self.response_id, self.attempt, pending)
            self.hub.changed(self.response_id)

    async def discard(self) -> None:
        """Every stored event of the response: a cut run's (or one a crash left)."""
        self._pending = []
        await self.events.discard(self.response_id)
        self.hub.changed(self.response_id)

    def next_seq(self) -> int:
        return self.count


def restarted_frame(seq: int) -> bytes:
    return event_frame(
        ErrorEvent(
            RESTARTED,
            "The background response was interrupted (its capacity was taken back, or the "
            "server restarted) and runs again from its input; read its events again from "
            "the start (`stream=true` without `starting_after`).",
            None,
            seq,
        )
    )


def follow_timeout_frame(seq: int, max_s: float, last: int) -> bytes:
    """The end of a follower open for `max_s`: where to read on from (`last`, the last
    event it sent; -1: none yet)."""
    again = (
        f"`stream=true&starting_after={last}`"
        if last >= 0
        else "`stream=true` (no event was sent yet)"
    )
    return event_frame(
        ErrorEvent(
            FOLLOW_TIMEOUT,
            f"This event stream was open for {max_s:g} seconds, the most one may be; the "
            f"response goes on. Reconnect with {again} to read the events after the last "
            "one sent.",
            None,
            seq,
        )
    )


async def follow(
    events: EventStore,
    hub: EventHub,
    status: Callable[[], Awaitable[str | None]],
    response_id: str,
    after: int = -1,
    poll_s: float = POLL_S,
    max_s: float = 0.0,
    clock: Callable[[], float] = time.monotonic,
) -> AsyncIterator[bytes]:
    """The response's events numbered after `after`, as they are stored, until it is
    final (or deleted: `status` gives None) and all are sent, or for at most `max_s`
    seconds (0: no bound), then a `follow_timeout` error event. Each read starts at the
    last event sent, so a discarded run shows as that event gone or changed."""
    deadline = clock() + max_s if max_s > 0 else None
    last, attempt = after, None
    while True:
        rows = await events.read(response_id, max(last, 0), READ_PAGE)
        sent = last >= 0 and (attempt is not None or last > after)
        if sent and (not rows or rows[0].seq != last or rows[0].attempt != attempt):
            yield restarted_frame(last + 1)
            return
        fresh = [row for row in rows if row.seq > last]
        if attempt is None and rows:
            attempt = rows[0].attempt
        if any(row.attempt != attempt for row in fresh):
            yield restarted_frame(last + 1)
            return
        if fresh:
            yield b"".join(row.data for row in fresh)
            last = fresh[-1].seq
            if len(rows) >= READ_PAGE:
                continue
        current = await status()
        if current is None:
            return
        if current in FINAL_STATUSES:
            if not fresh:  # nothing new since the response was final: all is sent
                return
            continue
        wait_s = poll_s
        if deadline is not None:
            wait_s = min(poll_s, deadline - clock())
            if wait_s <= 0:  # checked only between reads: no event is ever cut in two
                yield follow_timeout_frame(last + 1, max_s, last)
                return
        await hub.wait(response_id, wait_s)
