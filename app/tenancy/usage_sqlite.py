"""Usage rows into a SQLite file through a connection of the writer's own, in a process
of its own (app.tenancy.usage_sqlite_process): one frame across a pipe per group
commit, and one statement per commit (app.tenancy.usage_sqlite_rows).

Through SQLAlchemy's async engine over aiosqlite the same commit crosses threads about
six times (pool checkout, cursor, execute, commit, the reset on return), each a
future, a wake-up of the event loop and a fight for the interpreter's lock. A thread
of the writer's own, with one hand-over a commit, still took that lock from the event
loop several times a commit; a process of its own takes none of it.

The durability is the same: the same file, WAL and `synchronous=FULL`, and a commit
returns once the rows are on disk.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from app.tenancy.db import sqlite_path
from app.tenancy.sqlite_pragmas import BUSY_TIMEOUT_MS
from app.tenancy.usage_sqlite_process import SqliteProcess
from app.tenancy.usage_sqlite_rows import ROWS_PER_STATEMENT, THREAD_NAME

__all__ = ["ROWS_PER_STATEMENT", "THREAD_NAME", "SqliteInserts", "direct_path"]


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
    """Inserts usage rows (each a record's values in `FIELDS` order) and commits, in the
    writer's SQLite process (started on first use, again after it ended)."""

    def __init__(self, path: Path, busy_timeout_ms: int = BUSY_TIMEOUT_MS) -> None:
        self.path = path
        self._process = SqliteProcess(path, busy_timeout_ms)

    @property
    def pid(self) -> int | None:
        """The writer process's id while it runs (its CPU is the writer's)."""
        return self._process.pid

    async def start(self) -> None:
        """Start the process (else the first `insert` does)."""
        await self._process.start()

    async def insert(self, rows: list[tuple[Any, ...]]) -> None:
        await self._process.insert(rows)

    async def close(self) -> None:
        """Close the connection and end the process."""
        await self._process.close()
