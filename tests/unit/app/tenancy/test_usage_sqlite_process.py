"""The usage writer's SQLite process, on a real migrated SQLite file: rows are
committed (read back by a connection of its own) when `insert` returns, in a process
other than this one; SQLite's refusal of a row comes back as SQLite's own error; a
child killed mid-life fails one commit as the database being down and the next commit
starts a new child; SIGTERM does not end the child, closing the writer does."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from app.tenancy.db import open_database
from app.tenancy.usage import UsageRecord, _values
from app.tenancy.usage_faults import fault
from app.tenancy.usage_sqlite import SqliteInserts
from app.tenancy.usage_writer import UsageWriter


def record(request_id: str) -> UsageRecord:
    return UsageRecord(
        request_id=request_id,
        key_id="key_test",
        model="scripted",
        endpoint="/v1/chat/completions",
        prompt_tokens=5,
        cached_tokens=0,
        completion_tokens=3,
        reasoning_tokens=0,
        n=1,
        outcome="completed",
        queue_ms=None,
        ttft_ms=1.0,
        duration_ms=2.0,
        created_at=time.time(),
    )


def committed(path: Path) -> list[str]:
    """The request ids in the file, read by a connection of this test's own."""
    with sqlite3.connect(path) as conn:
        return [row[0] for row in conn.execute("SELECT request_id FROM usage ORDER BY id")]


@pytest.fixture
async def path(tmp_path: Path) -> AsyncIterator[Path]:
    file = tmp_path / "lilac.db"
    engine = await open_database(f"sqlite:///{file}")  # migrated: the usage table exists
    await engine.dispose()
    yield file


async def test_rows_are_committed_when_insert_returns_in_another_process(path: Path) -> None:
    inserts = SqliteInserts(path)
    try:
        await inserts.insert([_values(record("r1")), _values(record("r2"))])
        assert committed(path) == ["r1", "r2"]
        assert inserts.pid is not None and inserts.pid != os.getpid()
        await inserts.insert([_values(record(f"b{i}")) for i in range(150)])  # 3 statements
        assert len(committed(path)) == 152
    finally:
        await inserts.close()
    assert inserts.pid is None


async def test_a_row_sqlite_refuses_raises_sqlites_error_and_commits_nothing(path: Path) -> None:
    inserts = SqliteInserts(path)
    try:
        bad = list(_values(record("bad")))
        bad[0] = None  # request_id is NOT NULL
        with pytest.raises(sqlite3.IntegrityError) as refused:
            await inserts.insert([_values(record("good")), tuple(bad)])
        assert fault(refused.value) == "row"  # a dead letter, as on the thread before
        assert committed(path) == []  # one statement: all or nothing
        await inserts.insert([_values(record("good"))])  # the child still serves
        assert committed(path) == ["good"]
    finally:
        await inserts.close()


async def test_a_killed_child_fails_one_commit_as_database_down_then_is_replaced(
    path: Path,
) -> None:
    inserts = SqliteInserts(path)
    try:
        await inserts.insert([_values(record("before"))])
        first = inserts.pid
        assert first is not None
        os.kill(first, signal.SIGKILL)
        await asyncio.sleep(0.2)
        failures = 0
        for _ in range(2):  # the dead child's pipe fails at most one commit
            try:
                await inserts.insert([_values(record("after"))])
                break
            except sqlite3.OperationalError as exc:
                assert fault(exc) == "database"  # spooled by the writer, not set aside
                failures += 1
        assert failures <= 1
        assert committed(path) == ["before", "after"]
        assert inserts.pid not in (None, first)
    finally:
        await inserts.close()


async def test_sigterm_leaves_the_child_and_close_ends_it(path: Path) -> None:
    inserts = SqliteInserts(path)
    await inserts.insert([_values(record("one"))])
    pid = inserts.pid
    assert pid is not None
    os.kill(pid, signal.SIGTERM)  # the server's process group is signalled on shutdown
    await asyncio.sleep(0.2)
    await inserts.insert([_values(record("two"))])
    assert inserts.pid == pid and committed(path) == ["one", "two"]
    await inserts.close()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # reaped: gone


async def test_the_writer_commits_through_the_process_and_its_close_ends_it(
    path: Path, tmp_path: Path
) -> None:
    database = await open_database(f"sqlite:///{path}")
    writer = UsageWriter(database, tmp_path / "usage-spool.jsonl")
    try:
        await asyncio.gather(*(writer.write(record(f"w{i}")) for i in range(10)))
        assert sorted(committed(path)) == sorted(f"w{i}" for i in range(10))
        direct = writer._direct
        assert direct is not None and direct.pid is not None
        pid = direct.pid
        await writer.close()
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
        assert not writer.spool.exists()
    finally:
        await database.dispose()


async def test_the_writer_starts_its_process_before_the_first_record(
    path: Path, tmp_path: Path
) -> None:
    """The first request does not wait for the process to start."""
    database = await open_database(f"sqlite:///{path}")
    writer = UsageWriter(database, tmp_path / "usage-spool.jsonl")
    try:
        writer.start()
        for _ in range(500):  # the spawn, awaited by the writer's task
            direct = writer._direct
            if direct is not None and direct.pid is not None:
                break
            await asyncio.sleep(0.01)
        assert writer._direct is not None and writer._direct.pid is not None
        assert committed(path) == []  # nothing written yet
    finally:
        await writer.close()
        await database.dispose()
