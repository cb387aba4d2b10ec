"""The events of background responses, in the tenant database beside the responses.

Each row is one event of a response's stream (the SSE frame exactly as it was sent,
numbered by its `sequence_number`), written a batch at a time by the run that made it.
`attempt` names that run: a run cut before its end (the owner took the GPU back, a
restart) has its events discarded, and the next run writes its own from 0, so what is
stored is always one coherent run. Rows go with their response (`ResponseStore`'s delete
and purge).

The batches of every running response share one commit at a time (group commit): while
one transaction writes, the batches that arrive wait and go together in the next, so
however many responses run, their events take one writer's turn on the database, not
one each (on SQLite, many writers at once kept every other writer waiting past its
lock timeout). A group whose transaction fails is written again a batch at a time, so
one run's failure stays that run's."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete, func, insert, select

from app.db.events import response_events
from app.storage.database import TenantDatabase


@dataclass(frozen=True, slots=True)
class StoredEvent:
    seq: int
    attempt: str
    data: bytes  # one SSE frame: `event: <type>` and its JSON `data`


Rows = list[dict[str, Any]]


class EventStore:
    def __init__(self, database: TenantDatabase) -> None:
        self.database = database
        self._waiting: list[tuple[Rows, asyncio.Future[None]]] = []
        self._writer: asyncio.Task[None] | None = None

    async def append(self, response_id: str, attempt: str, events: Sequence[StoredEvent]) -> None:
        """A batch of one run's events, committed with the batches of the other runs
        that arrived meanwhile; returns once it is committed."""
        if not events:
            return
        rows = [
            {"response_id": response_id, "seq": e.seq, "attempt": attempt, "data": e.data}
            for e in events
        ]
        done = asyncio.get_running_loop().create_future()
        self._waiting.append((rows, done))
        if self._writer is None or self._writer.done():
            self._writer = asyncio.get_running_loop().create_task(self._write_groups())
        await done

    async def _write_groups(self) -> None:
        while self._waiting:
            group, self._waiting = self._waiting, []
            try:
                await self._insert([row for rows, _ in group for row in rows])
            except Exception as exc:
                if len(group) == 1:
                    _settle(group[0][1], exc)
                    continue
                for rows, done in group:  # alone, so that one run's failure stays its own
                    try:
                        await self._insert(rows)
                    except Exception as alone:
                        _settle(done, alone)
                    else:
                        _settle(done, None)
                continue
            for _, done in group:
                _settle(done, None)

    async def _insert(self, rows: Rows) -> None:
        engine = await self.database.engine()
        async with engine.begin() as conn:
            await conn.execute(insert(response_events), rows)

    async def read(self, response_id: str, from_seq: int, limit: int = 256) -> list[StoredEvent]:
        """Up to `limit` events numbered `from_seq` and on, in order."""
        table = response_events.c
        statement = (
            select(table.seq, table.attempt, table.data)
            .where(table.response_id == response_id, table.seq >= from_seq)
            .order_by(table.seq)
            .limit(limit)
        )
        if not self.database.exists():
            return []
        engine = await self.database.engine()
        async with engine.connect() as conn:
            rows = (await conn.execute(statement)).all()
        return [StoredEvent(int(seq), attempt, bytes(data)) for seq, attempt, data in rows]

    async def count(self, response_id: str) -> int:
        """How many events are stored (the next event's number)."""
        if not self.database.exists():
            return 0
        table = response_events.c
        statement = select(func.count()).where(table.response_id == response_id)
        engine = await self.database.engine()
        async with engine.connect() as conn:
            return int((await conn.execute(statement)).scalar() or 0)

    async def discard(self, response_id: str) -> None:
        """Every event of the response (a cut run's, before the next run writes)."""
        engine = await self.database.engine()
        async with engine.begin() as conn:
            await conn.execute(
                delete(response_events).where(response_events.c.response_id == response_id)
            )


def _settle(done: asyncio.Future[None], error: Exception | None) -> None:
    if done.done():
        return
    if error is None:
        done.set_result(None)
    else:
        done.set_exception(error)
