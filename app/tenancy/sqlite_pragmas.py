"""What every connection to the SQLite keys database sets (SQLAlchemy's and the usage
writer's own): a module of the standard library alone, so that the usage writer's
SQLite process (app.tenancy.usage_sqlite_process) starts without SQLAlchemy or alembic.
"""

from __future__ import annotations

from typing import Any

# SQLite waits this long for another writer's lock before failing.
BUSY_TIMEOUT_MS = 5000


def sqlite_pragmas(dbapi_conn: Any, busy_timeout_ms: int = BUSY_TIMEOUT_MS) -> None:
    """What every connection to the SQLite file sets (SQLAlchemy's and the usage
    writer's own, app.tenancy.usage_sqlite)."""
    cursor = dbapi_conn.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    # FULL: a committed usage row is on disk, not only in the OS's cache.
    cursor.execute("PRAGMA synchronous=FULL")
    cursor.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
    cursor.close()
