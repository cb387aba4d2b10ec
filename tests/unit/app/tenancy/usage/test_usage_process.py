"""The usage writer's child process (app.tenancy.usage.process, app.tenancy.usage.child):
rows committed durably before `insert` returns, the child's errors raised again as the
same class, a dead child's commit failing as the database being down and the next one
starting a fresh child, signals ignored, and no child left behind."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import psutil
import pytest

from app.db.engine import open_database
from app.tenancy.usage.process import ProcessInserts
from app.tenancy.usage.records import record_values
from tests.unit.app.tenancy.usage.test_usage_bounded import record


async def migrated(tmp_path: Path) -> Path:
    path = tmp_path / "lilac.db"
    await (await open_database(f"sqlite:///{path}")).dispose()
    return path


def ids(path: Path) -> list[str]:
    """The usage rows' ids, read by a connection of this test's own."""
    with sqlite3.connect(path) as conn:
        return [row[0] for row in conn.execute("SELECT request_id FROM usage ORDER BY 1")]


def children() -> set[int]:
    return {child.pid for child in psutil.Process().children()}


async def test_rows_are_committed_when_insert_returns(tmp_path: Path) -> None:
    path = await migrated(tmp_path)
    inserts = ProcessInserts(path)
    await inserts.insert([record_values(record("a")), record_values(record("b"))])
    assert ids(path) == ["a", "b"]
    await inserts.insert([record_values(record(f"many-{i}")) for i in range(150)])  # 3 statements
    assert len(ids(path)) == 152
    assert inserts.pid in children()
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    await inserts.close()


async def test_the_childs_errors_come_back_as_the_same_class(tmp_path: Path) -> None:
    path = await migrated(tmp_path)
    inserts = ProcessInserts(path)
    with pytest.raises(sqlite3.IntegrityError, match="NOT NULL"):
        await inserts.insert([record_values(record("bad", model=None))])
    with pytest.raises(OverflowError):  # beyond SQLite's integers, not msgpack's
        await inserts.insert([record_values(record("big", prompt_tokens=2**63))])
    await inserts.insert([record_values(record("good"))])  # the same child carries on
    assert ids(path) == ["good"]
    await inserts.close()

    missing = ProcessInserts(tmp_path / "no-such-folder" / "lilac.db")
    with pytest.raises(sqlite3.OperationalError):
        await missing.insert([record_values(record("nowhere"))])
    await missing.close()


async def test_a_killed_child_fails_its_commit_and_the_next_insert_starts_another(
    tmp_path: Path,
) -> None:
    path = await migrated(tmp_path)
    inserts = ProcessInserts(path, busy_timeout_ms=10_000)
    await inserts.insert([record_values(record("before"))])
    first = inserts.pid
    assert first is not None
    holder = sqlite3.connect(path)
    holder.execute("BEGIN EXCLUSIVE")  # the child's commit waits for the lock
    try:
        pending = asyncio.create_task(inserts.insert([record_values(record("lost"))]))
        await asyncio.sleep(0.3)
        assert not pending.done()
        os.kill(first, signal.SIGKILL)
        with pytest.raises(sqlite3.OperationalError, match="process ended"):
            await asyncio.wait_for(pending, 5)
    finally:
        holder.rollback()
        holder.close()
    await inserts.insert([record_values(record("after"))])
    assert inserts.pid not in (None, first)
    assert ids(path) == ["after", "before"]
    await inserts.close()
    assert first not in children()


async def test_a_cancelled_insert_leaves_the_next_one_a_fresh_child(tmp_path: Path) -> None:
    """The cancelled commit's reply must not be read as the next one's."""
    path = await migrated(tmp_path)
    inserts = ProcessInserts(path, busy_timeout_ms=10_000)
    await inserts.insert([record_values(record("before"))])
    first = inserts.pid
    holder = sqlite3.connect(path)
    holder.execute("BEGIN EXCLUSIVE")
    pending = asyncio.create_task(inserts.insert([record_values(record("cancelled"))]))
    await asyncio.sleep(0.3)
    pending.cancel()
    with pytest.raises(asyncio.CancelledError):
        await pending
    holder.rollback()
    holder.close()
    with pytest.raises(sqlite3.IntegrityError):  # its own error, not the other's "ok"
        await inserts.insert([record_values(record("bad", model=None))])
    assert inserts.pid not in (None, first)
    await inserts.close()
    assert set(ids(path)) <= {"before", "cancelled"}


async def test_the_child_ignores_sigint_and_sigterm_and_close_ends_it(tmp_path: Path) -> None:
    path = await migrated(tmp_path)
    inserts = ProcessInserts(path)
    await inserts.insert([record_values(record("a"))])
    pid = inserts.pid
    assert pid is not None
    os.kill(pid, signal.SIGINT)
    os.kill(pid, signal.SIGTERM)
    await asyncio.sleep(0.2)
    await inserts.insert([record_values(record("b"))])
    assert inserts.pid == pid
    await inserts.close()
    assert inserts.pid is None
    assert pid not in children()
    assert not psutil.pid_exists(pid)  # ended and reaped, not a zombie


def test_the_child_ends_when_its_parent_dies(tmp_path: Path) -> None:
    path = asyncio.run(migrated(tmp_path))
    script = textwrap.dedent(
        f"""
        import asyncio, os, sys
        from app.tenancy.usage.records import record_values
        from app.tenancy.usage.process import ProcessInserts
        from tests.unit.app.tenancy.usage.test_usage_bounded import record

        async def main():
            inserts = ProcessInserts({str(path)!r})
            await inserts.insert([record_values(record("from-the-parent"))])
            print(inserts.pid, flush=True)
            os._exit(0)  # no close: the socket ends with the process

        asyncio.run(main())
        """
    )
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=60
    )
    assert done.returncode == 0, done.stderr
    child = psutil.Process(int(done.stdout.strip()))
    child.wait(timeout=10)  # raises psutil.TimeoutExpired while it lives on
    assert ids(path) == ["from-the-parent"]


async def _both_rows_through_the_thread(inserts: ProcessInserts, path: Path) -> None:
    """Two inserts, both committed with no child running (the thread version's)."""
    await inserts.insert([record_values(record("threaded"))])
    await inserts.insert([record_values(record("again"))])
    assert inserts.pid is None
    assert ids(path) == ["again", "threaded"]
    await inserts.close()


async def test_where_no_child_starts_the_rows_go_through_a_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = await migrated(tmp_path)

    def refuse(*args: object, **kwargs: object) -> None:
        raise PermissionError("no processes here")

    monkeypatch.setattr(subprocess, "Popen", refuse)
    await _both_rows_through_the_thread(ProcessInserts(path), path)


async def test_a_child_that_ends_before_answering_leaves_the_rows_to_a_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A child that cannot start (its interpreter or imports fail) is not a database
    that is down: the same rows go through the thread version, at once."""
    from app.tenancy.usage import process as usage_process

    path = await migrated(tmp_path)
    monkeypatch.setattr(usage_process, "CHILD_MODULE", "app.tenancy.no_such_module")
    await _both_rows_through_the_thread(ProcessInserts(path), path)


def test_a_second_event_loop_gets_a_child_of_its_own(tmp_path: Path) -> None:
    """A tool that runs `asyncio.run` twice with one writer: the first loop's socket is
    not used from the second."""
    path = asyncio.run(migrated(tmp_path))
    inserts = ProcessInserts(path)
    asyncio.run(inserts.insert([record_values(record("first"))]))
    first = inserts.pid
    asyncio.run(inserts.insert([record_values(record("second"))]))
    assert inserts.pid not in (None, first)
    asyncio.run(inserts.close())
    assert ids(path) == ["first", "second"]
