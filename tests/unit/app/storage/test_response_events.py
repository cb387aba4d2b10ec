"""The events of background responses on a real SQLite file and a real PostgreSQL
server: written in batches, read from a number on, counted, discarded, and gone with
their response (deleted or purged), job and line included."""

from __future__ import annotations

import asyncio

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from app.db.deferred import deferred_jobs, deferred_lines
from app.deferred.store import DeferredStore, Job
from app.storage.database import TenantDatabase
from app.storage.response_events import EventStore, StoredEvent
from app.storage.responses import DAY_S
from tests.unit.app.storage.test_responses import NOW, A, statements, store_on, stored


def events_on(database: AsyncEngine) -> EventStore:
    return EventStore(TenantDatabase(str(database.url), database))


def batch(attempt: str, start: int, count: int) -> list[StoredEvent]:
    return [
        StoredEvent(i, attempt, f"event: e\ndata: {i}\n\n".encode())
        for i in range(start, start + count)
    ]


async def test_a_batch_is_one_transaction_and_reads_go_from_a_number(database: AsyncEngine) -> None:
    events = events_on(database)
    with statements(database) as seen:
        await events.append("resp_1", "run-a", batch("run-a", 0, 50))
    inserts = [s for s in seen if s.lstrip().upper().startswith("INSERT")]
    assert len(inserts) == 1  # one statement for the whole batch
    await events.append("resp_1", "run-a", batch("run-a", 50, 10))
    await events.append("resp_2", "run-b", batch("run-b", 0, 3))
    assert await events.count("resp_1") == 60 and await events.count("resp_2") == 3
    page = await events.read("resp_1", 55, limit=100)
    assert [e.seq for e in page] == [55, 56, 57, 58, 59]
    assert page[0].data == b"event: e\ndata: 55\n\n" and page[0].attempt == "run-a"
    assert [e.seq for e in await events.read("resp_1", 0, limit=4)] == [0, 1, 2, 3]
    await events.discard("resp_1")
    assert await events.count("resp_1") == 0 and await events.read("resp_1", 0) == []
    assert await events.count("resp_2") == 3


async def test_events_job_and_line_go_with_their_response(database: AsyncEngine) -> None:
    store = store_on(database)
    events = events_on(database)
    deferred = DeferredStore(TenantDatabase(str(database.url), database))
    for rid, created in (("resp_del", NOW), ("resp_old", NOW - 40 * DAY_S), ("resp_kept", NOW)):
        await store.save(stored(rid, created_at=created))
        await events.append(rid, "run", batch("run", 0, 5))
        job = Job(rid, "response", A, None, "queued", {}, None, {}, created, None)
        await deferred.create(job, ['{"model": "m"}'])
    await store.delete(A, "resp_del")
    assert await store.purge_expired(NOW) == 1
    for rid in ("resp_del", "resp_old"):
        assert await events.count(rid) == 0 and await deferred.get(rid) is None
    assert await events.count("resp_kept") == 5 and await deferred.get("resp_kept") is not None
    async with database.connect() as conn:
        lines = (await conn.execute(select(func.count()).select_from(deferred_lines))).scalar()
        jobs = (await conn.execute(select(func.count()).select_from(deferred_jobs))).scalar()
    assert lines == jobs == 1


async def test_the_batches_of_many_runs_share_one_commit_at_a_time(
    database: AsyncEngine,
) -> None:
    events = events_on(database)
    await events.append("resp_0", "run-0", batch("run-0", 0, 1))  # the database open
    with statements(database) as seen:
        await asyncio.gather(
            *(events.append(f"resp_{i}", f"run-{i}", batch(f"run-{i}", 1, 4)) for i in range(32))
        )
    inserts = [s for s in seen if s.lstrip().upper().startswith("INSERT")]
    assert 1 <= len(inserts) <= 2  # the first batch alone, then the 31 that waited for it
    assert [await events.count(f"resp_{i}") for i in range(1, 32)] == [4] * 31
    assert await events.count("resp_0") == 5


async def test_one_runs_failure_in_a_group_stays_its_own(database: AsyncEngine) -> None:
    events = events_on(database)
    await events.append("resp_x", "run-x", batch("run-x", 0, 2))
    results = await asyncio.gather(
        events.append("resp_a", "run-a", batch("run-a", 0, 3)),
        events.append("resp_x", "run-x", batch("run-x", 1, 2)),  # seq 1 again: refused
        events.append("resp_b", "run-b", batch("run-b", 0, 3)),
        return_exceptions=True,
    )
    assert results[0] is None and results[2] is None
    assert isinstance(results[1], Exception)
    assert await events.count("resp_a") == 3 and await events.count("resp_b") == 3
    assert await events.count("resp_x") == 2
