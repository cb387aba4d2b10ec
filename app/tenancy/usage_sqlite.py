"""Usage rows into a SQLite file through a connection of the writer's own, on a thread
of its own: one hand-over to that thread per group commit.

Through SQLAlchemy's async engine over aiosqlite the same commit crosses threads about
six times (pool checkout, cursor, execute, commit, the reset on return), each a
future, a wake-up of the event loop and a fight for the GIL: about 1.5 ms of the event
loop's CPU per commit, paid by the few requests that share it. Here the insert and the
commit run back to back on the writer's thread (sqlite releases the GIL while it
writes and syncs), and the event loop only waits for the one result.

The durability is the same: the same file, WAL and `synchronous=FULL`, and a commit
returns once the rows are on disk.
"""

from __future__ import annotations

import asyncio
import sqlite3
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from app.tenancy.db import BUSY_TIMEOUT_MS, sqlite_path, sqlite_pragmas


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
    """Runs `executemany` + commit on one connection, opened on first use on the
    executor's single thread (sqlite3 connections stay on the thread that made them)."""

    def __init__(self, path: Path, busy_timeout_ms: int = BUSY_TIMEOUT_MS) -> None:
        self.path = path
        self._busy_timeout_ms = busy_timeout_ms
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="lilac-usage")
        self._conn: sqlite3.Connection | None = None

    async def insert(self, statement: str, rows: list[tuple[Any, ...]]) -> None:
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._executor, self._insert, statement, rows)

    def _insert(self, statement: str, rows: list[tuple[Any, ...]]) -> None:
        conn = self._connection()
        try:
            conn.executemany(statement, rows)
            conn.commit()
        except BaseException:
            conn.rollback()
            raise

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            # No file is created here that SQLAlchemy's engine would not create too; a
            # missing folder fails as it does there (sqlite3.OperationalError).
            conn = sqlite3.connect(self.path, timeout=self._busy_timeout_ms / 1000)
            try:
                sqlite_pragmas(conn, self._busy_timeout_ms)
            except BaseException:
                conn.close()
                raise
            self._conn = conn
        return self._conn

    async def close(self) -> None:
        """Close the connection (on its thread) and stop the thread."""
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._executor, self._close)
        self._executor.shutdown(wait=False)

    def _close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
