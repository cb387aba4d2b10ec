"""The events of background responses, in the tenant database beside the responses.

Each row is one event of a response's stream (the SSE frame exactly as it was sent,
numbered by its `sequence_number`), written a batch at a time by the run that made it.
`attempt` names that run: a run cut before its end (the owner took the GPU back, a
restart) has its events discarded, and the next run writes its own from 0, so what is
stored is always one coherent run. Rows go with their response (`ResponseStore`'s delete
and purge)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import Column, Integer, LargeBinary, String, Table, delete, func, insert, select

from app.storage.database import TenantDatabase
from app.storage.responses_schema import RESPONSE_ID_CHARS
from app.tenancy.schema import metadata

ATTEMPT_CHARS = 32

response_events = Table(
    "response_events",
    metadata,
    Column("response_id", String(RESPONSE_ID_CHARS), primary_key=True),
    Column("seq", Integer, primary_key=True),
    Column("attempt", String(ATTEMPT_CHARS), nullable=False),
    Column("data", LargeBinary, nullable=False),
)


@dataclass(frozen=True, slots=True)
class StoredEvent:
    seq: int
    attempt: str
    data: bytes  # one SSE frame: `event: <type>` and its JSON `data`


class EventStore:
    def __init__(self, database: TenantDatabase) -> None:
        self.database = database

    async def append(self, response_id: str, attempt: str, events: Sequence[StoredEvent]) -> None:
        """A batch of one run's events, in one transaction."""
        if not events:
            return
        rows = [
            {"response_id": response_id, "seq": e.seq, "attempt": attempt, "data": e.data}
            for e in events
        ]
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
