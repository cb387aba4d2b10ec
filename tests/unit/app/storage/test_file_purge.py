"""Expiry and the stored-bytes reservation of the file store, and the bounded purge of
expired files, on a real SQLite file and a real PostgreSQL server: an expired file is
gone for every reader at once and its rows after the purge, each purge transaction
deletes a bounded number of rows, a file kept for a batch is still read by the batch,
and concurrent uploads under a quota never pass it together."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine

from app.errors import FileNotFound, StorageQuotaExceeded
from app.storage.file_purge import FilePurge, chunk_steps
from app.storage.files import FileStore
from app.tenancy.quotas import StoredBytesQuota
from tests.unit.app.storage.test_files import CHUNK, collect, count_rows, store_on

DAY = 86_400.0


class Clock:
    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def purge_on(store: FileStore, **bounds: int) -> FilePurge:
    return FilePurge(store.database, **bounds)


@contextmanager
def deleted_per_statement(database: AsyncEngine) -> Iterator[list[int]]:
    """The rows each DELETE statement run on `database` deleted, in order."""
    counts: list[int] = []

    def after(_conn: Any, cursor: Any, statement: str, *_: Any) -> None:
        if statement.lstrip().upper().startswith("DELETE"):
            counts.append(cursor.rowcount)

    event.listen(database.sync_engine, "after_cursor_execute", after)
    try:
        yield counts
    finally:
        event.remove(database.sync_engine, "after_cursor_execute", after)


async def test_an_expired_file_is_gone_at_once_and_its_rows_after_the_purge(
    database: AsyncEngine,
) -> None:
    clock = Clock()
    store = store_on(database, clock)
    store.retention_s = 30 * DAY
    short = await store.create("alice", "batch", "a.jsonl", b"x" * 200, expires_after_s=3600)
    default = await store.create("alice", "batch", "b.jsonl", b"y" * 10)
    forever = FileStore(store.database, chunk_bytes=CHUNK, clock=clock)  # retention 0
    kept = await forever.create("alice", "batch", "c.jsonl", b"z")
    assert short.expires_at == int(clock.now + 3600)
    assert default.expires_at == int(clock.now + 30 * DAY) and kept.expires_at is None
    assert (await store.get("alice", short.id)).expires_at == short.expires_at

    clock.now += 3600  # expiry is the second it names
    with pytest.raises(FileNotFound):
        await store.get("alice", short.id)
    with pytest.raises(FileNotFound):
        await collect(store.content("alice", short.id))
    with pytest.raises(FileNotFound):
        await store.delete("alice", short.id)
    listed = await store.list("alice", None, None, 100, "desc")
    assert [f.id for f in listed] == [kept.id, default.id]
    assert await count_rows(database) == (3, 4 + 1 + 1)  # the rows stay until the purge

    assert await purge_on(store).purge_expired(clock.now) == 1
    assert await count_rows(database) == (2, 2)
    clock.now += 30 * DAY
    assert await purge_on(store).purge_expired(clock.now) == 1
    assert await count_rows(database) == (1, 1)
    assert (await store.get("alice", kept.id)).id == kept.id


async def test_the_purge_deletes_a_bounded_number_of_rows_a_transaction(
    database: AsyncEngine,
) -> None:
    clock = Clock()
    store = store_on(database, clock)
    for i in range(5):  # 5 files of 4 chunks (64 bytes each)
        await store.create("alice", "batch", f"{i}.jsonl", b"x" * (4 * CHUNK), expires_after_s=60)
    clock.now += 60
    with deleted_per_statement(database) as deleted:
        purged = await purge_on(store, files_per_step=2, chunks_per_step=3).purge_expired(clock.now)
    assert purged == 5 and await count_rows(database) == (0, 0)
    assert sum(deleted) == 5 + 20 and max(deleted) <= 3


def test_chunk_steps_never_span_more_than_the_budget() -> None:
    steps = list(chunk_steps([(1, 5), (2, 0), (3, 2), (4, 1)], 3))
    assert steps == [[(1, 0, 3)], [(1, 3, 5), (3, 0, 1)], [(3, 1, 2), (4, 0, 1)]]
    assert list(chunk_steps([], 3)) == []


async def test_a_file_kept_for_a_batch_stays_readable_to_it_only(database: AsyncEngine) -> None:
    clock = Clock()
    store = store_on(database, clock)
    made = await store.create("alice", "batch", "in.jsonl", b"a\nb\n", expires_after_s=60)
    clock.now += 120
    assert await purge_on(store).purge_expired(clock.now, keep={made.id}) == 0
    with pytest.raises(FileNotFound):
        await store.get("alice", made.id)
    assert await collect(store.lines("alice", made.id)) == [b"a", b"b"]  # the batch reads it
    assert await purge_on(store).purge_expired(clock.now) == 1  # its batch ended
    with pytest.raises(FileNotFound):
        await collect(store.lines("alice", made.id))


async def test_expire_hides_files_at_once(database: AsyncEngine) -> None:
    clock = Clock()
    store = store_on(database, clock)
    made = await store.create("alice", "batch_output", "out.jsonl", b"{}\n")
    await purge_on(store).expire([made.id], clock.now)
    with pytest.raises(FileNotFound):
        await store.get("alice", made.id)
    assert await purge_on(store).purge_expired(clock.now) == 1


async def test_an_upload_over_the_quota_leaves_nothing(database: AsyncEngine) -> None:
    store = store_on(database)
    quota = StoredBytesQuota(1000)
    await store.create("alice", "batch", "a", b"x" * 600)
    assert await store.held_bytes("alice") == 600
    check = quota.for_upload(0, 500)
    with pytest.raises(StorageQuotaExceeded) as refused:
        await store.create("alice", "batch", "b", b"x" * 500, size=500, quota=check)
    message = refused.value.message
    assert "600 bytes" in message and "1000 bytes" in message and "DELETE /v1/files" in message
    assert await count_rows(database) == (1, -(-600 // CHUNK))
    # Another owner has a quota of its own; what another key stores elsewhere counts.
    await store.create("bob", "batch", "b", b"x" * 900, size=900, quota=quota.for_upload(0, 900))
    with pytest.raises(StorageQuotaExceeded):
        await store.create(
            "carol", "batch", "c", b"x" * 10, size=10, quota=quota.for_upload(995, 10)
        )


async def test_concurrent_uploads_never_pass_the_quota_together(database: AsyncEngine) -> None:
    store = store_on(database)
    quota = StoredBytesQuota(1000)

    async def upload(i: int) -> bool:
        try:
            await store.create(
                "alice", "batch", f"{i}", b"x" * 400, size=400, quota=quota.for_upload(0, 400)
            )
        except StorageQuotaExceeded:
            return False
        return True

    accepted = await asyncio.gather(*(upload(i) for i in range(6)))
    assert sum(accepted) == 2
    assert await store.held_bytes("alice") == 800
