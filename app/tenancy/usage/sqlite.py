"""Usage rows into a SQLite file through a connection of the writer's own, on a thread
of its own: one hand-over to that thread per group commit, and one statement per
commit. The writer now commits in a process of its own (app.tenancy.usage.process,
which says why); this thread version does the work where no child process can start.

Through SQLAlchemy's async engine over aiosqlite the same commit crosses threads about
six times (pool checkout, cursor, execute, commit, the reset on return), each a
future, a wake-up of the event loop and a fight for the GIL: about 1.5 ms of the event
loop's CPU per commit, paid by the few requests that share it. Here the insert and the
commit run back to back on the writer's thread (sqlite releases the GIL while it
writes and syncs), and the event loop only waits for the one result.

A group commit is one multi-row `INSERT`, run in autocommit mode: the statement is its
own transaction, so the insert and the commit are one call into SQLite, which drops
the GIL once and takes it back once. `executemany` steps each row apart and
`commit` is one more step; each step hands the GIL back and forth with the event loop
(and waits up to the interpreter's switch interval for it when the loop is busy),
which cost the event loop more than the rows themselves. A batch beyond
`ROWS_PER_STATEMENT` is several statements in one explicit transaction.

The durability is the same: the same file, WAL and `synchronous=FULL`, and a commit
returns once the rows are on disk.
"""

from __future__ import annotations

import asyncio
import sqlite3
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from sqlalchemy.ext.asyncio import AsyncEngine

from app.db.engine import sqlite_path
from app.db.sqlite import BUSY_TIMEOUT_MS, connect
from app.tenancy.usage.records import UsageRow
from app.tenancy.usage.statements import insert_rows


def direct_path(database: AsyncEngine) -> Path | None:
    """The file behind a SQLite engine, when a connection of our own reaches the same
    database (not in memory, no URL options that change how it opens); else None."""
    if database.dialect.name != "sqlite" or database.url.query:
        return None
    path = sqlite_path(database.url.render_as_string(hide_password=False))
    if path is None or not str(path) or str(path) == ":memory:":
        return None
    return path


class SqliteInserts:
    """Inserts usage rows (each a record's values in `FIELDS` order) and commits, on one
    connection in autocommit mode, opened on first use on the executor's single thread
    (sqlite3 connections stay on the thread that made them)."""

    def __init__(self, path: Path, busy_timeout_ms: int = BUSY_TIMEOUT_MS) -> None:
        self.path = path
        self._busy_timeout_ms = busy_timeout_ms
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lilac-usage")
        self._conn: sqlite3.Connection | None = None

    async def insert(self, rows: list[UsageRow]) -> None:
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._executor, self._insert, rows)

    def _insert(self, rows: list[UsageRow]) -> None:
        if self._conn is None:
            self._conn = connect(self.path, self._busy_timeout_ms)
        insert_rows(self._conn, rows)

    async def close(self) -> None:
        """Close the connection (on its thread) and stop the thread."""
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._executor, self._close)
        self._executor.shutdown(wait=False)

    def _close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
