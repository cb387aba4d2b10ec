"""What every connection to the SQLite file sets, and the usage writer's own connection,
in a module light enough for the usage writer's child process to import (no SQLAlchemy,
no Alembic: app.tenancy.usage.process starts in a fraction of a second)."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

# SQLite waits this long for another writer's lock before failing.
BUSY_TIMEOUT_MS = 5000


def sqlite_pragmas(dbapi_conn: Any, busy_timeout_ms: int = BUSY_TIMEOUT_MS) -> None:
    """What every connection to the SQLite file sets (SQLAlchemy's and the usage
    writer's own, app.tenancy.usage.sqlite and app.tenancy.usage.process)."""
    cursor = dbapi_conn.cursor()
    # First: the pragmas after it wait for a lock this long too.
    cursor.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
    cursor.execute("PRAGMA journal_mode=WAL")
    # FULL: a committed usage row is on disk, not only in the OS's cache.
    cursor.execute("PRAGMA synchronous=FULL")
    cursor.close()


def connect(path: Path | str, busy_timeout_ms: int = BUSY_TIMEOUT_MS) -> sqlite3.Connection:
    """The usage writer's connection: autocommit (isolation_level None: a statement
    outside BEGIN commits itself), with the pragmas. No file is created here that
    SQLAlchemy's engine would not create too; a missing folder fails as it does there
    (sqlite3.OperationalError)."""
    conn = sqlite3.connect(path, timeout=busy_timeout_ms / 1000, isolation_level=None)
    try:
        sqlite_pragmas(conn, busy_timeout_ms)
    except BaseException:
        conn.close()
        raise
    return conn
