"""The file store on a real SQLite file and a real PostgreSQL server: content in
chunks, read back whole, line by line and chunk by chunk; one owner's files are not
another's; listing pages by cursor; a failed write leaves nothing behind."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable

import pytest
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from app.db.schema import file_chunks, files
from app.errors import FileNotFound, StorageUnavailable
from app.storage.database import TenantDatabase
from app.storage.files import STALE_UPLOAD_S, FileStore
from tests.postgres import TempPostgres

CHUNK = 64  # small chunks: a few hundred bytes span several rows


def store_on(database: AsyncEngine, clock: Callable[[], float] = time.time) -> FileStore:
    url = database.url.render_as_string(hide_password=False)
    return FileStore(TenantDatabase(url, database), chunk_bytes=CHUNK, clock=clock)


async def collect(chunks: AsyncIterator[bytes]) -> list[bytes]:
    return [chunk async for chunk in chunks]


async def count_rows(database: AsyncEngine) -> tuple[int, int]:
    async with database.connect() as conn:
        file_rows = (await conn.execute(select(func.count()).select_from(files))).scalar_one()
        chunk_rows = (
            await conn.execute(select(func.count()).select_from(file_chunks))
        ).scalar_one()
    return file_rows, chunk_rows


LINES = [b'{"custom_id": "r%d", "n": "%s"}' % (i, b"x" * (i * 7)) for i in range(20)]
CONTENT = b"\n".join(LINES[:10]) + b"\n\n   \r\n" + b"\r\n".join(LINES[10:])  # no final newline


async def test_content_round_trips_through_chunks(database: AsyncEngine) -> None:
    store = store_on(database)
    made = await store.create("alice", "batch", "in.jsonl", CONTENT)
    assert made.id.startswith("file-") and made.object == "file" and made.status == "processed"
    assert (made.bytes, made.filename, made.purpose) == (len(CONTENT), "in.jsonl", "batch")
    assert made.line_count == 20  # the blank lines are not counted
    assert await store.get("alice", made.id) == made
    chunks = await collect(store.content("alice", made.id))
    assert b"".join(chunks) == CONTENT
    assert len(chunks) == -(-len(CONTENT) // CHUNK) and all(len(c) == CHUNK for c in chunks[:-1])
    assert await collect(store.lines("alice", made.id)) == LINES
    assert await count_rows(database) == (1, len(chunks))


async def test_lines_written_as_a_stream(database: AsyncEngine) -> None:
    store = store_on(database)

    async def produced() -> AsyncIterator[bytes]:
        for line in LINES:
            yield line  # no newline: the store adds one

    made = await store.create_from_lines("alice", "batch_output", "out.jsonl", produced())
    assert made.line_count == 20 and made.purpose == "batch_output"
    assert b"".join(await collect(store.content("alice", made.id))) == b"\n".join(LINES) + b"\n"
    assert await collect(store.lines("alice", made.id)) == LINES


async def test_an_empty_file(database: AsyncEngine) -> None:
    store = store_on(database)
    made = await store.create("alice", "batch", "empty.jsonl", b"")
    assert (made.bytes, made.line_count) == (0, 0)
    assert await collect(store.content("alice", made.id)) == []
    assert await collect(store.lines("alice", made.id)) == []


async def test_another_owner_can_neither_see_read_nor_delete(database: AsyncEngine) -> None:
    store = store_on(database)
    mine = await store.create("alice", "batch", "a.jsonl", CONTENT)
    with pytest.raises(FileNotFound):
        await store.get("bob", mine.id)
    with pytest.raises(FileNotFound):
        await collect(store.content("bob", mine.id))
    with pytest.raises(FileNotFound):
        await collect(store.lines("bob", mine.id))
    with pytest.raises(FileNotFound):
        await store.delete("bob", mine.id)
    assert await store.list("bob", None, None, 100, "desc") == []
    with pytest.raises(FileNotFound) as cursor:  # nor use it as a cursor
        await store.list("bob", None, mine.id, 100, "desc")
    assert cursor.value.param == "after"
    assert await store.get("alice", mine.id) == mine  # all still there

    await store.delete("alice", mine.id)
    with pytest.raises(FileNotFound):
        await store.get("alice", mine.id)
    with pytest.raises(FileNotFound):
        await store.delete("alice", mine.id)
    assert await count_rows(database) == (0, 0)


async def test_listing_pages_by_cursor_in_either_order(database: AsyncEngine) -> None:
    store = store_on(database)
    made = [await store.create("alice", "batch", f"{i}.jsonl", b"{}\n") for i in range(5)]
    await store.create("alice", "batch_output", "out.jsonl", b"{}\n")
    await store.create("bob", "batch", "b.jsonl", b"{}\n")
    ids = [f.id for f in made]
    newest = await store.list("alice", "batch", None, 2, "desc")
    assert [f.id for f in newest] == ids[::-1][:2]
    rest = await store.list("alice", "batch", newest[-1].id, 10, "desc")
    assert [f.id for f in rest] == ids[::-1][2:]
    oldest = await store.list("alice", "batch", ids[1], 10, "asc")
    assert [f.id for f in oldest] == ids[2:]
    everything = await store.list("alice", None, None, 100, "desc")
    assert len(everything) == 6 and everything[0].purpose == "batch_output"


async def test_a_write_that_fails_leaves_nothing(database: AsyncEngine) -> None:
    store = store_on(database)

    async def broken() -> AsyncIterator[bytes]:
        yield b"x" * (CHUNK * 3)
        raise RuntimeError("the producer failed")

    with pytest.raises(RuntimeError):
        await store.create_from_lines("alice", "batch_output", "out.jsonl", broken())
    assert await count_rows(database) == (0, 0)


async def test_an_upload_cut_by_a_crash_is_invisible_then_removed(database: AsyncEngine) -> None:
    now = [1_000_000.0]
    store = store_on(database, clock=lambda: now[0])

    async def cut() -> AsyncIterator[bytes]:
        yield b"y" * (CHUNK * 2)
        raise KeyboardInterrupt  # a stand-in for the process dying: nothing runs after

    with pytest.raises(KeyboardInterrupt):
        await store.create_from_lines("alice", "batch_output", "cut.jsonl", cut())
    # A crash would skip the clean-up; make the row look like one it left behind.
    async with database.begin() as conn:
        await conn.execute(files.insert().values(
            id="file-crashed", owner="alice", purpose="batch", filename="c", bytes=0,
            line_count=0, chunks=0, status="uploading", created_at=now[0], expires_at=None,
        ))  # fmt: skip
        pk = (await conn.execute(select(files.c.pk).where(files.c.id == "file-crashed"))).scalar()
        await conn.execute(file_chunks.insert().values(file_pk=pk, seq=0, data=b"partial"))
    assert await store.list("alice", None, None, 10, "desc") == []
    with pytest.raises(FileNotFound):
        await store.get("alice", "file-crashed")
    now[0] += STALE_UPLOAD_S + 1
    await store.create("alice", "batch", "next.jsonl", b"{}\n")
    assert await count_rows(database) == (1, 1)


@pytest.mark.parametrize("database", ["postgresql"], indirect=True)
async def test_a_database_outage_is_a_503_and_the_store_recovers(
    database: AsyncEngine, pg_server: TempPostgres
) -> None:
    store = store_on(database)
    made = await store.create("alice", "batch", "a.jsonl", CONTENT)
    pg_server.halt()
    try:
        for attempt in range(2):  # the pool's broken connection, then a refused connect
            with pytest.raises(StorageUnavailable) as down:
                await store.get("alice", made.id)
            assert (down.value.status_code, down.value.code) == (503, "database_unavailable")
            assert down.value.retry_after is not None, attempt
        with pytest.raises(StorageUnavailable):
            await store.create("alice", "batch", "b.jsonl", CONTENT)
    finally:
        pg_server.resume()
    assert b"".join(await collect(store.content("alice", made.id))) == CONTENT
